"""The gateway as configured (`build_app`) and the stand-alone server (`gpu-autoscaler-gateway`)."""

from __future__ import annotations

import logging
from typing import Callable
from urllib.parse import urlsplit

from gateway.breaker import Breaker
from gateway.bucket import AsyncTokenBucket, limiter_client
from gateway.config import GatewayConfig, GatewayConfigError, load_gateway_config
from gateway.degrade import ResponseCache
from gateway.identity import Identity
from gateway.middleware import RateLimitMiddleware
from gateway.proxy import ProxyApp

log = logging.getLogger("gpu_autoscaler.gateway")


def build_app(cfg: GatewayConfig, app: Callable | None = None) -> RateLimitMiddleware:
    """The gateway as configured: `app` (or a proxy to `upstream`) behind identity, limits and the degrade path.

    One circuit breaker per Redis: the cache shares the limiter's unless it has its own Redis
    (`degrade.cache_redis_url`)."""
    if app is None:
        if cfg.upstream is None:
            raise GatewayConfigError("upstream: the stand-alone gateway needs upstream = URL")
        app = ProxyApp(cfg.upstream)
    if urlsplit(cfg.redis.url).username is None:
        log.warning("gateway: redis.url names no user, so the gateway logs in as Redis' default user; with the "
                    "shipped users (deploy/redis/users.acl) log in as gpuas-gateway, which cannot write the "
                    "daemon's lease, overrides or API-key map (docs/security.md)")
    client = limiter_client(cfg.redis.url, cfg.redis.timeout_s)
    breaker = Breaker(cfg.redis.breaker_s)
    dg = cfg.degrade
    cache = None
    if dg.cache:
        if dg.cache_redis_url:
            cache_client, cache_breaker = limiter_client(dg.cache_redis_url, cfg.redis.timeout_s), \
                Breaker(cfg.redis.breaker_s)
        else:
            cache_client, cache_breaker = client, breaker
        cache = ResponseCache(cache_client, cfg.redis.prefix, dg.cache_ttl_s, dg.cache_max_bytes,
                              dg.cache_max_entries_per_tenant, dg.cache_max_bytes_per_tenant, cache_breaker)
    fallback = ProxyApp(dg.cheaper_upstream) if dg.cheaper_upstream else None
    return RateLimitMiddleware(app, AsyncTokenBucket(client, cfg.redis.prefix),
                               Identity.from_config(cfg, client, breaker), fail_open=cfg.fail_open, cache=cache,
                               fallback=fallback, breaker=breaker,
                               max_body_bytes=cfg.max_body_bytes)


def main(argv: list[str] | None = None) -> None:
    """`gpu-autoscaler-gateway --config gateway.toml`: a stand-alone rate-limiting reverse proxy (needs uvicorn)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="gpu-autoscaler-gateway", description=main.__doc__)
    ap.add_argument("--config", "-c", required=True, help="gateway TOML file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line, with its URL and query, per proxied request
    try:
        app = build_app(load_gateway_config(args.config))
    except GatewayConfigError as exc:
        sys.stderr.write(f"gpu-autoscaler-gateway: config error: {exc}\n")
        sys.exit(2)
    try:
        import uvicorn
    except ImportError:
        sys.stderr.write("gpu-autoscaler-gateway: needs an ASGI server: pip install 'gpu-autoscaler[gateway]'\n")
        sys.exit(2)
    # proxy_headers=False: scope["client"] stays the TCP peer, the address `trusted_proxies` is about (uvicorn
    # would otherwise replace it with X-Forwarded-For from local clients, who could then pose as the proxy)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False)


if __name__ == "__main__":
    main()
