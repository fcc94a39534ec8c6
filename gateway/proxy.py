"""The stand-alone gateway's reverse proxy (httpx): only the request's path and query go to the upstream."""

from __future__ import annotations

import logging
import re
from typing import Awaitable, Callable
from urllib.parse import quote, unquote_to_bytes

import httpx

from gateway.asgi import read_body, reply_json, stream_body

log = logging.getLogger("gpu_autoscaler.gateway")

HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
              b"proxy-authenticate", b"proxy-authorization"}
# the gateway's own credentials end at the gateway: an upstream (or whatever a crafted target reached) never
# sees a tenant's API key
NOT_FORWARDED = HOP_BY_HOP | {b"host", b"authorization", b"x-api-key"}


_UNSAFE_BYTES = re.compile(rb"[^\x21-\x7e]")


def _escape(raw: bytes) -> bytes:
    """Bytes an HTTP target cannot carry as they are (space, controls, non-ASCII) percent-escaped, byte by byte."""
    return _UNSAFE_BYTES.sub(lambda m: b"%%%02X" % m.group()[0], raw)


class ProxyApp:
    """A minimal ASGI reverse proxy (httpx): the stand-alone gateway's upstream and the cheaper fallback.

    The request's path and query go upstream as the client sent them (``raw_path``: percent-escapes kept),
    joined to the upstream URL's own path; scheme, host and port are always the upstream's. A target that is
    not a path starting with ``/`` (``@host:port/x``, ``http://host/x``, ``\\host``, ``*``), or that holds a
    ``.`` or ``..`` segment (which would leave the upstream's path prefix) or a ``;`` (a path parameter, escaped
    or not: ``/..;/admin`` is ``/../admin`` to an upstream that strips them), is refused 400:
    the upstream URL used to be the upstream string + the target, so ``@127.0.0.1:9302/admin`` made the
    upstream a user name and sent the request (with the tenant's headers) to any host the caller chose.
    The gateway's own credentials (Authorization, X-API-Key) are not forwarded.

    Bodies are streamed both ways, and the answer's bytes are passed on undecoded with their own
    Content-Encoding and Content-Length (and Set-Cookie); only hop-by-hop headers are dropped.
    """

    def __init__(self, url: str, timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.base = httpx.URL(url)
        self._prefix = self.base.raw_path.partition(b"?")[0].rstrip(b"/")
        self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    def target_url(self, scope: dict) -> httpx.URL | None:
        """The upstream URL for this request: only the path (after the upstream's own) and the query are the
        client's. None when the request target is not origin-form (a path starting with /)."""
        raw = scope.get("raw_path")
        if raw is None:
            raw = quote(scope.get("path", "")).encode("ascii")
        if not raw.startswith(b"/"):
            return None
        path = unquote_to_bytes(raw)
        if any(seg in (b".", b"..") for seg in re.split(rb"[/\\]", path)):
            return None   # /base/../admin would leave the upstream's path prefix (httpx removes dot segments)
        if b";" in path:
            return None   # a path parameter: servers that strip them (Tomcat, Jetty) read /..;/admin as /../admin
        query = scope.get("query_string") or b""
        full = _escape(self._prefix + raw) + (b"?" + _escape(query) if query else b"")
        try:
            url = self.base.copy_with(raw_path=full)
        except (httpx.InvalidURL, UnicodeDecodeError):
            return None
        if (url.scheme, url.host, url.port, url.userinfo) != (self.base.scheme, self.base.host, self.base.port,
                                                              self.base.userinfo):
            return None   # cannot happen with copy_with(raw_path=...); never send elsewhere if it did
        return url

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable], send: Callable) -> None:
        if scope["type"] != "http":
            return
        url = self.target_url(scope)
        if url is None:
            await reply_json(send, 400, {"error": "the request target must be a path starting with /, "
                                                  "without . or .. segments or ;"}, [])
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k not in NOT_FORWARDED]
        sized = any(k == b"content-length" for k, _ in headers)
        chunked = any(k == b"transfer-encoding" for k, _ in scope.get("headers", []))
        if sized and chunked:
            # the server read the body by its chunks; the client's Content-Length sent beside it would frame a
            # different body upstream (a smuggling attempt or a broken client: RFC 9112 6.3, an error)
            await reply_json(send, 400, {"error": "a request with both Content-Length and Transfer-Encoding"}, [])
            return
        # a body with a length (kept in `headers`) or chunked is streamed; none at all stays none
        content = stream_body(receive) if sized or chunked else await read_body(receive)
        try:
            req = self.client.build_request(scope.get("method", "GET"), url, headers=headers, content=content)
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            log.warning("gateway: upstream %s failed: %s", self.url, exc)
            await reply_json(send, 502, {"error": "upstream unavailable"}, [])
            return
        try:
            out = [(k.lower(), v) for k, v in resp.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await resp.aclose()


