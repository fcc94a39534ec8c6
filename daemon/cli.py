"""gpu-autoscaler command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click

from daemon.cli_common import _as_sim, _fail, _load
from daemon.cli_simulate import _objective_opts, simulate
from daemon.cli_windows import propose_windows
from daemon.config import Config, ConfigError
from daemon.text import plural
from gateway.configfile import MAX_DURATION_S


def _setup_logging(level: str) -> None:
    from daemon.sources.redact import RedactingFilter

    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for h in logging.getLogger().handlers:  # no URL's user and password in the journal, whoever logs it
        h.addFilter(RedactingFilter())
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # urllib3 warns once per retry of a request ("Retrying (Retry(total=1, ...))"); what failed is said once, by the
    # caller's own line (the source's "source unavailable: ..."): the retries only at debug
    logging.getLogger("urllib3.connectionpool").setLevel(logging.DEBUG if level.lower() == "debug" else logging.ERROR)


def short_note(note: str) -> str:
    """The forecaster note's first clause (`forecaster: NAME from DIR`), and with inference services the model
    that forecasts them (`services (N): NAME`): the start-up line stays one short line and still names every
    model in use; the whole note, with its scores, is logged at debug level and served in /api/v1/plan."""
    main, sep, services = note.partition("; services (")
    out = main.split(" (", 1)[0]
    return f"{out}; services ({services.split(' on their ', 1)[0]}" if sep else out


def source_text(cfg: Config) -> str:
    if cfg.source.kind == "prometheus":
        from daemon.sources.redact import redact_url

        return f"prometheus ({redact_url(cfg.source.prometheus.url)})"
    return cfg.source.kind


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "-c", "config", type=click.Path(dir_okay=False, path_type=Path),
              envvar="GPU_AUTOSCALER_CONFIG", default=None,
              help="TOML config file (default: the embedded simulated cluster).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def cli(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """Forecast-driven capacity daemon for shared GPU clusters."""
    _setup_logging(log_level)
    ctx.ensure_object(dict)
    ctx.obj["config"] = config


cli.add_command(simulate)
cli.add_command(propose_windows)


@cli.command()
@click.option("--sim", is_flag=True, help="Use the embedded simulated cluster whatever the config says.")
@click.option("--cycles", type=click.IntRange(min=1), default=None,
              help="Stop after N cycles (default: run until stopped).")
@click.option("--interval", type=click.FloatRange(min=0.01, max=MAX_DURATION_S), default=None,
              help="Seconds between cycles (overrides config).")
@click.option("--no-http", is_flag=True, help="Do not serve /metrics, /healthz and /alerts.")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="HTTP port (overrides config).")
@click.option("--fail-node", "fail_node", multiple=True, metavar="CYCLE:NODE",
              help="Simulator only: fail NODE (e.g. sim-node-0003) before cycle CYCLE; repeatable.")
@click.pass_context
def run(ctx: click.Context, sim: bool, cycles: int | None, interval: float | None, no_http: bool,
        port: int | None, fail_node: tuple[str, ...]) -> None:
    """Run the daemon: collect -> forecast -> plan -> act every cycle."""
    configured = _load(ctx)  # as the file says: --sim over a real cluster's config keeps that store (fresh_sim_store)
    cfg = _as_sim(configured) if sim else configured
    if interval is None and cfg.source.kind == "simulator" and ctx.obj["config"] is None:
        interval = 2.0  # the embedded demo: one simulated minute every 2 s
    if interval is not None:
        cfg = cfg.model_copy(update={"cycle": cfg.cycle.model_copy(update={"interval_s": interval})})
    if port is not None:
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"port": port})})
    demo_token = webhook_token = None
    if ctx.obj["config"] is None and cfg.source.kind == "simulator" and cfg.server.token() is None \
            and not cfg.server.allow_unauthenticated_webhook:
        # the embedded simulator: a webhook token for this run (a real source keeps refusing posts until one
        # is configured), so simulated alerts can be posted without an open webhook
        import secrets

        webhook_token = secrets.token_urlsafe(24)
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"webhook_token": webhook_token})})
    if ctx.obj["config"] is None and not cfg.access.tokens:
        # the embedded demo: a fresh operator token for this run, so the console and API can be tried
        import secrets

        from daemon.config import AccessConfig, AccessToken

        demo_token = secrets.token_urlsafe(24)
        cfg = cfg.model_copy(update={"access": AccessConfig(tokens=[AccessToken(name="demo-operator", role="operator",
                                                                                token=demo_token)])})
    from daemon.service.loop import Daemon, summary_line
    from daemon.service.wiring import build_runtime
    from daemon.web.auth import Access

    try:
        if cfg.server.enabled and not no_http:
            cfg.server.token()  # an unreadable token file must stop the start, not the first webhook
            cfg.server.metrics_secret()
            Access(cfg.access)
        if cfg.source.kind == "simulator":  # a new cluster each run: its own store, afresh (daemon/state/sim_store.py)
            from daemon.state.sim_store import fresh_sim_store

            cfg, note = fresh_sim_store(cfg, configured.source.kind)
            if note:
                click.echo(f"gpu-autoscaler: {note}", err=True)
        rt = build_runtime(cfg)
    except ConfigError as exc:
        _fail(f"config error: {exc}")
    except Exception as exc:
        _fail(f"cannot start: {exc}", 1)
    click.echo(f"gpu-autoscaler: source={source_text(cfg)} actuators={[a.name for a in rt.actuators]} "
               f"dry_run={cfg.actuators.dry_run} {short_note(rt.forecaster_note)} "
               f"interval={cfg.cycle.interval_s:g}s", err=True)
    _warn_default_redis_user(cfg)
    if demo_token is not None and cfg.server.enabled and not no_http:
        click.echo(f"gpu-autoscaler: console http://{cfg.server.host}:{cfg.server.port}/ui/ and /api/v1, "
                   f"operator token for this run: {demo_token}", err=True)
    if webhook_token is not None and cfg.server.enabled and not no_http:
        click.echo(f"gpu-autoscaler: webhook http://{cfg.server.host}:{cfg.server.port}/alerts, "
                   f"webhook token for this run: {webhook_token}", err=True)
    d = Daemon(rt, on_cycle=lambda r: click.echo(summary_line(r, cfg.source.kind == "simulator")), max_cycles=cycles,
               serve_http=False if no_http else None)
    d.config_path = ctx.obj["config"]
    for spec in fail_node:
        at, _, node = spec.partition(":")
        if not at.isdigit() or not node:
            _fail(f"--fail-node wants CYCLE:NODE, got {spec!r}")
        if rt.sim is None or rt.sim.node_index(node) is None:
            _fail(f"--fail-node: {node!r} is not a node of the simulated cluster (sim-node-0000...)")
        d.fail_nodes[int(at)] = node
    from daemon.service.loop import Fatal, StartError

    try:
        d.run_forever()
    except StartError as exc:
        _fail(f"cannot start: {exc}", 1)
    except Fatal as exc:
        _fail(f"stopped: {exc}", 1)


@cli.command(name="check-config")
@click.pass_context
def check_config(ctx: click.Context) -> None:
    """Validate the config (and the model it points at) without touching any system; exit 2 if it is wrong."""
    cfg = _load(ctx)
    from daemon.forecasting.choose import build
    from daemon.web.auth import Access
    from forecaster.registry import ModelError

    try:
        _, note = build(cfg)
    except ModelError as exc:
        _fail(f"config error: forecaster.kind = 'lstm' but {exc}")
    if cfg.source.kind != "simulator" and "simulator" in cfg.actuators.enabled:
        _fail("config error: actuators.enabled: 'simulator' needs source.kind = 'simulator'")
    kc = cfg.actuators.kubernetes
    uses_kube = {"kubernetes", "kueue"} & set(cfg.actuators.enabled) or (cfg.ha.enabled and cfg.ha.backend ==
                                                                           "kubernetes")
    if uses_kube and not kc.in_cluster and kc.kubeconfig is not None and not os.access(kc.kubeconfig, os.R_OK):
        # a file it names, as the token files: run would stop on it ("Invalid kube-config file")
        _fail(f"config error: actuators.kubernetes.kubeconfig: {kc.kubeconfig}: no such file, or not readable")
    try:
        if cfg.server.enabled:
            if cfg.server.token() is None and not cfg.server.allow_unauthenticated_webhook:  # unreadable: error
                click.echo("warning: no server.webhook_token_file: the webhook will refuse every alert (403) unless "
                           "server.allow_unauthenticated_webhook = true", err=True)
            cfg.server.metrics_secret()  # an unreadable or short metrics token file
            Access(cfg.access)
    except ConfigError as exc:
        _fail(f"config error: {exc}")
    from gateway.keys import GatewayConfigError, digest_map

    try:
        digest_map(cfg.gateway.keys, "gateway.keys")  # unreadable key files, one key for two tenants
    except GatewayConfigError as exc:
        _fail(f"config error: {exc}")
    _warn_default_redis_user(cfg)
    from daemon.state.store import check_state_path

    errors, warnings = check_state_path(cfg.state.path)  # read-only: the running daemon's file is never written
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if errors:
        _fail(f"config error: {errors[0]}")
    from daemon.service.wiring import actuator_names

    click.echo(f"ok: source={source_text(cfg)} actuators={actuator_names(cfg)} "
               f"dry_run={cfg.actuators.dry_run} tenants={tenants_text(cfg)} interval={cfg.cycle.interval_s:g}s "
               f"{note}")  # a one-off check: the whole note, with why this model (or none) is used


def tenants_text(cfg: Config) -> str:
    """The tenants a run of this config plans for: the simulated source makes its own (`make run`'s 40), where
    `[[tenants]]` (0 in the default config) only names some of them."""
    if cfg.source.kind != "simulator":
        return str(len(cfg.tenants))
    return f"{cfg.source.simulator.tenants} (simulated; {len(cfg.tenants)} in [[tenants]])"


def _warn_default_redis_user(cfg: Config) -> None:
    """Say loudly when the daemon's Redis URLs name no ACL user: Redis' default user can write everything, so
    unless the gateways log in as their own restricted user their credential writes the control plane too."""
    from daemon.config.redis_acl import url_user

    for key, url in cfg.daemon_redis_urls().items():
        if url_user(url) is None:
            click.echo(f"warning: {key} logs in as Redis' default user: whoever holds the gateways' Redis "
                       "credential can write the lease, the operator's overrides and their audit, and the API-key "
                       "map, unless the gateways log in as their own ACL user; use deploy/redis/users.acl "
                       "(gpu-autoscaler redis-acl) and log in as gpuas-daemon (docs/security.md)", err=True)


@cli.command()
@click.option("--sim", is_flag=True, help="Use the embedded simulated cluster whatever the config says.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole plan as JSON.")
@click.pass_context
def plan(ctx: click.Context, sim: bool, as_json: bool) -> None:
    """Run one cycle with dry-run actuators and print the plan."""
    cfg = _load(ctx, sim)
    cfg = cfg.model_copy(update={"actuators": cfg.actuators.model_copy(update={"dry_run": True})})
    from daemon.service.wiring import build_runtime

    try:
        rt = build_runtime(cfg, with_store=False)
    except ConfigError as exc:
        _fail(f"config error: {exc}")
    # every actuator is in dry run here: each says what it would do (the log's `dry run: ... would:` lines) whoever
    # holds an HA lease; under the lease this one-off cycle was a standby's, and said nothing of them
    rt.runner.may_act = None
    rt.runner.shadow_log = None   # nor is a one-off cycle a dry run's record (HA with Redis keeps them there)
    res = rt.runner.run_once()
    if res.plan is None:
        _fail(f"no plan: {res.error}", 1)
    if as_json:
        click.echo(json.dumps(res.plan.to_dict(), indent=2, sort_keys=True, default=str))
        return
    p = res.plan
    click.echo(json.dumps(p.summary(), indent=2))
    if p.reservations:
        click.echo("reservations:")
        for t, r in sorted(p.reservations.items(), key=lambda kv: -kv[1])[:20]:
            click.echo(f"  {t:<24} {plural(r, 'GPU', fmt='>7')}")
    for pre in p.preemptions[:20]:
        click.echo(f"preempt {pre.job_id} ({pre.tenant}, {plural(pre.gpus, 'GPU')}): {pre.reason}")
    if res.outcome != "ok":
        sys.exit(1)


def _history_opts(f):
    f = click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                     help="History file (CSV/parquet, wide or long time,tenant,value).")(f)
    f = click.option("--trace", type=click.Choice(["alibaba", "azure", "helios", "servegen"]), default=None,
                     help="Build history from a real public trace in the data dir.")(f)
    f = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Where the public traces lie (default ../shared/data or $GPU_AUTOSCALER_DATA).")(f)
    f = click.option("--days", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     help="Days of history from the configured source.")(f)
    return f


@cli.command()
@_history_opts
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Training epochs (default: config).")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Backtest JSON + PNG go here.")
@click.option("--quiet", is_flag=True, help="No progress output (bars or lines).")
@click.option("--this-cluster", is_flag=True,
              help="The --data file is this cluster's own history: score the models for this cluster.")
@click.option("--select-by", type=click.Choice(["wql", "peak", "replay"]), default=None,
              help="Rank the candidates by the per-step wQL, the loss of the peak over the policy's lead windows, "
                   "or a replay of the held-out history through the policy (default: retrain.select_by).")
@click.pass_context
def retrain(ctx, data, trace, data_dir, days, epochs, model_dir, report_dir, quiet, this_cluster, select_by) -> None:
    """Train a new LSTM, score it, the current model and every baseline on the most recent held-out window;
    the best becomes the model in use (models/manifest.json `in_use`). --trace/--data write to trained/
    unless --model-dir says otherwise; --data with --this-cluster writes to forecaster.model_dir, the models the
    daemon uses."""
    cfg = _load(ctx)
    from daemon.forecasting.retrain import DataError, retrain_from_config
    from daemon.sources.base import SourceError
    from forecaster.registry import ModelError

    try:
        if this_cluster and data is None:
            raise DataError("--this-cluster goes with --data (the file holding this cluster's history)")
        out = retrain_from_config(cfg, data=data, trace=trace, data_dir=data_dir, days=days, progress=not quiet,
                                  out_dir=report_dir, epochs=epochs, model_dir=model_dir, this_cluster=this_cluster,
                                  select_by=select_by)
    except (DataError, SourceError, ModelError, ValueError) as exc:
        _fail(f"retrain: {exc}", 1)
    click.echo(out.table)
    click.echo(out.message)


@cli.command(name="backtest")
@_history_opts
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True)
@click.option("--tenants", type=click.IntRange(min=1), default=40, show_default=True, help="Tenants scored (sampled).")
@click.pass_context
def backtest_cmd(ctx, data, trace, data_dir, days, report_dir, tenants) -> None:
    """Score the current model and the baselines on the most recent history (rolling origin)."""
    cfg = _load(ctx)
    import numpy as np

    from daemon.forecasting.retrain import DataError, check_one_season, load_history, spec_for
    from daemon.sources.base import SourceError
    from forecaster import backtest, registry
    from forecaster.baselines import standard_baselines

    try:
        frame, step_s = load_history(cfg, data=data, trace=trace, data_dir=data_dir, days=days)
    except (DataError, SourceError) as exc:
        _fail(str(exc), 1)
    try:
        check_one_season(len(frame), step_s, cfg, "backtest: history too short")
    except DataError as exc:
        _fail(str(exc), 1)
    spec = spec_for(frame, step_s, cfg)
    if len(frame) < spec.season:
        _fail(f"backtest: history too short: {len(frame)} steps is less than one season ({spec.season} steps)", 1)
    holdout = min(spec.season, max(spec.horizon * 4, len(frame) // 5))
    cols = list(frame.columns)
    if len(cols) > tenants:
        cols = sorted(np.random.default_rng(0).choice(cols, tenants, replace=False).tolist())
    qs = tuple(cfg.forecaster.quantiles)
    models = standard_baselines(spec.season, qs, min(len(frame), spec.season * 9))
    try:
        cur = registry.load_current(cfg.forecaster.model_dir)
        if cur.spec.step_s != step_s:
            click.echo(f"no LSTM scored: {cur.name} forecasts at {cur.spec.step_s} s steps, this history is {step_s} s",
                       err=True)
        elif len(frame) - holdout < cur.min_history:
            click.echo(f"no LSTM scored: {cur.name} needs {cur.min_history} steps of history before the scored "
                       f"window, this history has {len(frame) - holdout}", err=True)
        else:
            models["lstm"] = cur
    except registry.ModelError as exc:
        click.echo(f"no LSTM scored: {exc}", err=True)
    try:
        res = backtest.run(frame[cols], models, start=len(frame) - holdout, horizon=spec.horizon,
                           history_steps=spec.season * 9, quantiles=qs, season=spec.season, max_origins=24)
    except ValueError as exc:
        _fail(f"backtest: {exc}", 1)
    j, p = backtest.write_report(res, report_dir, "backtest")
    click.echo(backtest.table(res.report))
    click.echo(f"report: {j}  plot: {p}")


@cli.command(name="recommend")
@click.argument("replay", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_objective_opts
@click.option("--json", "as_json", is_flag=True, help="Print the recommendation as JSON.")
def recommend_cmd(replay: Path, minimize: str | None, subject_to: tuple[str, ...], as_json: bool) -> None:
    """The setting on the predictive frontier of a replay JSON (simulate --sweep) that best meets the objective,
    as a config snippet with its expected figures and reactive's and static's beside them."""
    from daemon.sim import recommend as rec

    try:
        obj = rec.objective(minimize, subject_to or None)
    except rec.ObjectiveError as exc:
        _fail(f"recommend: {exc}", 1)
    try:
        doc = json.loads(replay.read_text())
    except ValueError as exc:  # not JSON (or not UTF-8): bad input, exit 2 as for a bad argument
        _fail(f"recommend: {replay}: not JSON: {exc}", 2)
    except RecursionError:  # the decoder recurses once per level: [[[[...]]]] is no replay either
        _fail(f"recommend: {replay}: not a replay: JSON nested too deeply", 2)
    try:
        r = rec.recommend(doc, obj)
    except rec.ReplayError as exc:  # JSON, but not a replay's shape
        _fail(f"recommend: {replay}: {exc}", 2)
    except (rec.ObjectiveError, ValueError, KeyError) as exc:
        _fail(f"recommend: {replay}: {exc}", 1)
    click.echo(json.dumps(r, indent=2) if as_json else rec.text(r))


@cli.command(name="redis-acl")
@click.option("--daemon-password-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File holding the daemon user's password (its SHA-256 goes in the ACL).")
@click.option("--gateway-password-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File holding the gateways' user's password.")
@click.pass_context
def redis_acl_cmd(ctx: click.Context, daemon_password_file: Path | None, gateway_password_file: Path | None) -> None:
    """Print the Redis ACL file (Redis' `aclfile`) for this config's prefixes: a daemon user that owns the
    control plane and a gateway user that reads limits and keys and writes only its buckets. Without password
    files the passwords are placeholders Redis refuses to load."""
    from daemon.config.redis_acl import acl_file
    from gateway.configfile import read_secret

    cfg = _load(ctx)
    pw = {}
    for who, path in (("daemon", daemon_password_file), ("gateway", gateway_password_file)):
        try:
            pw[who] = read_secret(path, f"--{who}-password-file", ValueError) if path is not None else None
        except ValueError as exc:
            _fail(f"redis-acl: {exc}")
    try:
        click.echo(acl_file(cfg.actuators.redis.prefix, cfg.ha.prefix, pw["daemon"], pw["gateway"]), nl=False)
    except ValueError as exc:
        _fail(f"redis-acl: {exc}")


@cli.command(name="shadow-report")
@click.option("--tenant", default=None, help="Only this tenant's rows.")
@click.option("--last", "last", type=click.IntRange(min=1), default=None,
              help="Only the newest N cycles' records  [default: all kept]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def shadow_report_cmd(ctx: click.Context, tenant: str | None, last: int | None, as_json: bool) -> None:
    """What the daemon would have done while its actuators were in dry run, against the demand seen afterwards:
    per tenant and tier, the waits its holds would have avoided, the preemptions (and work lost) they would have
    cost, how often requests would have been throttled, and the forecast's realised coverage."""
    cfg = _load(ctx)
    from daemon.shadow.report import shadow_report, skipped_lines, table

    path = cfg.state.path
    if cfg.ha.enabled and cfg.ha.backend == "redis":  # every leader's records, in the lease's Redis
        import redis

        from daemon.shadow.log import RedisShadowLog
        from daemon.sources.redact import redact_url

        url = cfg.ha.redis_url or cfg.actuators.redis.url
        where = f"{redact_url(url)} ({cfg.ha.prefix}:shadow)"
        try:
            client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            records = RedisShadowLog(client, cfg.ha.prefix).records(last)
        except redis.RedisError as exc:
            _fail(f"shadow-report: cannot read {where}: {exc}", 1)
    else:
        where = str(path)
        if not path.exists():
            _fail(f"shadow-report: no state store at {path} (state.path): run the daemon with actuators.dry_run = "
                  "true first", 1)
        import sqlite3

        from daemon.state.store import read_shadow_records

        try:  # read-only: the running daemon's file is never written; an operator who may only read it can run this
            records = read_shadow_records(path, last)
        except sqlite3.Error as exc:
            _fail(f"shadow-report: cannot read {path}: {exc}", 1)
    if not records:
        _fail(f"shadow-report: {where} holds no shadow record: the daemon records them only while "
              "actuators.dry_run = true (and state.shadow_records), on the acting replica, from cycles that read "
              "fresh data (while the source is down or its data stale, a cycle records nothing)", 1)
    rep = shadow_report(records, tenant=tenant)
    for line in skipped_lines(rep):  # a corrupt record costs its own cycle, one line each, never the report
        click.echo(f"shadow-report: {where}: {line}", err=True)
    if not rep["cycles"]:
        _fail(f"shadow-report: none of the {len(records)} shadow records in {where} could be read", 1)
    if tenant is not None and not rep["tenants"]:
        _fail(f"shadow-report: no record names tenant {tenant!r}", 1)
    click.echo(json.dumps(rep, indent=2) if as_json else table(rep))


@cli.command(name="node-exporter")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on; this host only unless given (e.g. the node's address for Prometheus).")
@click.option("--port", type=click.IntRange(0, 65535), default=9445, show_default=True)
@click.option("--squeue", default="squeue", show_default=True,
              help="squeue that names a Slurm job's account (the job id comes from the process's cgroup).")
@click.option("--once", is_flag=True, help="Print the metrics once and exit (no server).")
def node_exporter(host: str, port: int, squeue: str, once: bool) -> None:
    """Serve per-GPU utilisation, memory and process->tenant from NVML (pynvml)."""
    from prometheus_client import generate_latest, start_http_server

    from daemon.sources.nvml_exporter import SlurmAccounts, registry

    reg, col = registry(SlurmAccounts(squeue))
    if col.error:
        click.echo(f"gpu-autoscaler node-exporter: {col.error}; serving gpuas_node_nvml_up 0", err=True)
    else:
        click.echo(f"gpu-autoscaler node-exporter: {plural(col.count, 'GPU')}, driver {col.driver}", err=True)
    if once:
        click.echo(generate_latest(reg).decode())
        return
    start_http_server(port, addr=host, registry=reg)
    click.echo(f"serving http://{host}:{port}/metrics", err=True)
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


def main() -> None:
    cli(obj={})


if __name__ == "__main__":
    main()
