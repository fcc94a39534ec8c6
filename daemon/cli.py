"""gpu-autoscaler command line."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import click

from daemon.config import Config, ConfigError, load_config
from daemon.text import agree, plural
from gateway.configfile import MAX_DURATION_S


def _setup_logging(level: str) -> None:
    from daemon.sources.redact import RedactingFilter

    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for h in logging.getLogger().handlers:  # no URL's user and password in the journal, whoever logs it
        h.addFilter(RedactingFilter())
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def short_note(note: str) -> str:
    """The forecaster note's first clause (`forecaster: NAME from DIR`): the start-up line stays one short line;
    the whole note, with its scores, is logged at debug level and served in /api/v1/plan."""
    return note.split(" (", 1)[0]


def source_text(cfg: Config) -> str:
    if cfg.source.kind == "prometheus":
        from daemon.sources.redact import redact_url

        return f"prometheus ({redact_url(cfg.source.prometheus.url)})"
    return cfg.source.kind


def _load(ctx: click.Context, sim: bool = False) -> Config:
    try:
        cfg = load_config(ctx.obj["config"])
    except ConfigError as exc:
        click.echo(f"gpu-autoscaler: config error: {exc}", err=True)
        sys.exit(2)
    if sim:
        cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"kind": "simulator"})})
    return cfg


def _fail(msg: str, code: int = 2) -> None:
    click.echo(f"gpu-autoscaler: {msg}", err=True)
    sys.exit(code)


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
    cfg = _load(ctx, sim)
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
    click.echo(f"ok: source={source_text(cfg)} actuators={list(cfg.actuators.enabled)} "
               f"dry_run={cfg.actuators.dry_run} tenants={len(cfg.tenants)} interval={cfg.cycle.interval_s:g}s "
               f"{note}")  # a one-off check: the whole note, with why this model (or none) is used


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
    unless --model-dir says otherwise."""
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


def _objective_opts(f):
    f = click.option("--minimize", default=None, metavar="METRIC",
                     help="Recommendation: the figure to minimize  [default: high_unmet]")(f)
    f = click.option("--subject-to", "subject_to", multiple=True, metavar="CONSTRAINT",
                     help="Recommendation, repeatable: e.g. 'normal_unmet<=reactive', 'preemptions<=1.5*reactive', "
                          "'utilization>=0.8'  [default: normal_unmet<=reactive and preemptions<=reactive]")(f)
    return f


@cli.command()
@click.option("--trace", type=click.Choice(["synthetic", "helios", "alibaba", "servegen"]), default="synthetic",
              show_default=True, help="servegen: the 43 ServeGen m-small LLM API clients as inference services "
                                      "(requests in, replicas out) beside synthetic batch tenants")
@click.option("--cold-start", "cold_start", default=None, metavar="DURATION",
              help="servegen: seconds from a replica's placement to its first served request, e.g. 3m or 90s  "
                   "[default: 3m]")
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Replay this cluster's own history (the formats of retrain --data: time + one column per tenant "
                   "of GPU demand, or long time,tenant,value); the last --days are replayed.")
@click.option("--from-source", "from_source", is_flag=True,
              help="Replay the history the configured source serves (Prometheus range or the simulator): "
                   "--history-days before the --days replayed.")
@click.option("--history-days", "history_days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="--from-source: days read before the replayed window  [default: one season + 1 day]")
@click.option("--until", default=None, metavar="TIME",
              help="--from-source: the replayed window ends at this time (ISO 8601)  [default: now]")
@click.option("--tier", "tier_flags", multiple=True, metavar="TENANT=TIER",
              help="--data/--from-source, repeatable: the tier of a tenant (overrides [[tenants]]).")
@click.option("--job-gpus", "job_flags", multiple=True, metavar="TENANT=N",
              help="--data/--from-source, repeatable: GPUs per job of a tenant (overrides [[tenants]] job_gpus).")
@click.option("--default-job-gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="--data/--from-source: GPUs per job of tenants with no job size in the config or flags.")
@click.option("--quick-forecaster", is_flag=True,
              help="--data/--from-source: choose among the baselines only (as the daemon does at start-up) instead "
                   "of as retrain chooses (an LSTM trained on the history before the window, and the baselines).")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="--data/--from-source: epochs of the LSTM trained on the history before the window.")
@click.option("--recommend", "recommend_", is_flag=True,
              help="Sweep the settings and print the recommended one as a config snippet (implies --sweep).")
@_objective_opts
@click.option("--tenants", type=click.IntRange(min=2), default=40, show_default=True, help="synthetic only")
@click.option("--gpus", type=click.IntRange(min=8), default=1024, show_default=True, help="synthetic only")
@click.option("--days", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Days replayed.")
@click.option("--seed", type=int, default=7, show_default=True,
              help="synthetic: the generator's draw; servegen: the requests' arrivals and the batch tenants")
@click.option("--strategies", default="static,reactive,predictive,perfect", show_default=True)
@click.option("--sweep", is_flag=True, help="Run each strategy over its own knob and compare Pareto frontiers.")
@click.option("--table", "show_table", is_flag=True,
              help="Print the full table of every setting (a sweep prints its summary only; the JSON has them all).")
@click.option("--legend", is_flag=True, help="Print what each column of the table is under it (implies --table).")
@click.option("--forecast-every", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run the forecaster every N steps (shift the horizon in between).")
@click.option("--high-vcs", type=click.IntRange(min=0), default=None,
              help="helios only: the N VCs with the largest quota are the high tier  [default: 2]")
@click.option("--high-vc", "high_vc", multiple=True, metavar="VC",
              help="helios only, repeatable: exactly these VCs are the high tier (instead of --high-vcs)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes that replay the settings side by side (the results do not change)  "
                   "[default: the CPUs this process may use]")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/replay"),
              show_default=True)
@click.option("--min-gpus", "min_gpus", is_flag=True,
              help="Instead of comparing at this size: the smallest cluster (whole nodes) on which each strategy "
                   "meets the SLO (--slo-high, --slo-normal), and what predictive saves.")
@click.option("--slo-high", "slo_high", type=float, default=None,
              help="--min-gpus: share of the high tier's demand allowed unmet (and of its requests throttled)  "
                   "[default: 0.001]")
@click.option("--slo-normal", "slo_normal", type=float, default=None,
              help="--min-gpus: share of the normal tier's demand allowed unmet  [default: 0.02]")
@click.pass_context
def simulate(ctx, trace, cold_start, data, from_source, history_days, until, tier_flags, job_flags, default_job_gpus,
             quick_forecaster, epochs, recommend_, minimize, subject_to, tenants, gpus, days, seed, strategies, sweep,
             show_table, legend, forecast_every, high_vcs, high_vc, data_dir, workers, out, min_gpus, slo_high,
             slo_normal) -> None:
    """Replay a trace (built-in, or this cluster's own history with --data/--from-source) through static, reactive,
    predictive and perfect-forecast strategies on the same physics."""
    cfg = _load(ctx)
    from daemon.forecasting.retrain import DataError, default_data_dir
    from daemon.sim import recommend as rec, report, terminal, workloads
    from daemon.sim.replay import STRATEGIES, default_sweep, replay_workers, run_replay
    from forecaster.baselines import SeasonalNaive
    from forecaster.progress import phase
    from forecaster.registry import ModelError

    chosen = tuple(s.strip() for s in strategies.split(",") if s.strip())
    bad = [s for s in chosen if s not in STRATEGIES]
    if bad:
        _fail(f"--strategies: unknown {bad}; choose from {list(STRATEGIES)}")
    own = data is not None or from_source
    trace_given = ctx.get_parameter_source("trace") == click.core.ParameterSource.COMMANDLINE
    if data is not None and from_source:
        _fail("--data and --from-source: give one (a history file, or the configured source)")
    if own and trace_given:
        _fail("--trace replays a built-in trace; --data/--from-source replay this cluster's history: give one")
    if not own and (tier_flags or job_flags or quick_forecaster or epochs is not None):
        _fail("--tier, --job-gpus, --quick-forecaster and --epochs go with --data or --from-source")
    if not from_source and (history_days is not None or until is not None):
        _fail("--history-days and --until go with --from-source")
    until_s = None
    if until is not None:
        import pandas as pd

        try:
            until_s = pd.Timestamp(until).timestamp()
        except ValueError as exc:
            _fail(f"--until {until!r}: not a time ({exc})")
    cold_s = 180.0
    if cold_start is not None:
        if trace != "servegen" or own:
            _fail("--cold-start is the inference services' cold start: use it with --trace servegen")
        cold_s = _duration_s(cold_start, "--cold-start")
    if (high_vcs is not None or high_vc) and (trace != "helios" or own):
        _fail("--high-vcs and --high-vc set the Helios tier mapping: use them with --trace helios")
    if high_vcs is not None and high_vc:
        _fail("--high-vcs and --high-vc: give one (the N largest-quota VCs, or the VCs by name)")
    try:
        obj = rec.objective(minimize, subject_to or None)
    except rec.ObjectiveError as exc:
        _fail(str(exc))
    if recommend_:
        sweep = True
    slo = _slo(min_gpus, slo_high, slo_normal, sweep)
    data_root = data_dir or default_data_dir()
    own_notes: dict = {}
    model = None
    choice_note = None
    if own:
        from daemon.sim import own as own_mod

        try:
            tiers_f = own_mod.parse_pairs(tier_flags, "--tier", "TIER")
            jobs_f = own_mod.parse_pairs(job_flags, "--job-gpus", "N")
            if data is not None:
                frame, where = own_mod.read_file(data, cfg), str(data)
            else:
                season_days = cfg.forecaster.season_steps * cfg.cycle.resolution_s / 86400
                hist = history_days if history_days is not None else season_days + 1.0
                frame, where = own_mod.read_source(cfg, days + hist, until=until_s)
                click.echo(f"history from the {where}", err=True)
            w, own_notes = own_mod.own_workload(frame, cfg, days=days, step_s=cfg.cycle.resolution_s, where=where,
                                                tier_flags=tiers_f, job_flags=jobs_f,
                                                default_job_gpus=default_job_gpus,
                                                name=f"own-{data.stem}" if data is not None else "own-source")
            if not own_notes["contention"]["contends"]:  # every strategy would give the same figures
                if recommend_:
                    raise DataError(own_notes["contention"]["message"])
                click.echo(f"WARNING: {own_notes['contention']['message']}", err=True)
            if own_notes["tenants_unnamed"]:
                click.echo(f"{plural(len(own_notes['tenants_unnamed']), 'tenant')} not named in the config or flags "
                           f"{agree(len(own_notes['tenants_unnamed']), 'is', 'are')} "
                           f"replayed as tier normal with {default_job_gpus}-GPU jobs: "
                           f"{', '.join(own_notes['tenants_unnamed'][:6])}", err=True)
            if "predictive" in chosen:
                # the start-up selection logs every candidate's score in one long line: here they go to the JSON
                quiet = logging.getLogger("gpu_autoscaler.selection")
                level = quiet.level
                quiet.setLevel(max(level, logging.WARNING))
                try:
                    c = own_mod.choose_forecaster(w.demand.iloc[: w.start], cfg, cfg.cycle.resolution_s,
                                                  quick=quick_forecaster, epochs=epochs, progress=True)
                finally:
                    quiet.setLevel(level)
                model, choice_note = c.model, c.details()
                click.echo(c.line(), err=True)
        except DataError as exc:
            _fail(f"simulate: {exc}", 1)
        except Exception as exc:  # a source that cannot be read: one line, not a traceback
            from daemon.sources.base import SourceError

            if isinstance(exc, SourceError):
                _fail(f"simulate: source {cfg.source.kind}: {exc}", 1)
            raise
        steps = len(w.demand) - w.start
    else:
        if trace == "synthetic":
            w = workloads.synthetic(tenants, gpus, days, seed=seed)
            w.gpus_per_node = cfg.cluster.gpus_per_node  # the configured node size (the traces bring their own)
            w.job_gpus = w.job_gpus.clip(1, w.gpus_per_node)
        elif trace == "servegen":
            from daemon.sim.servegen import servegen

            tight = {t: min(lvl.rate(t) for lvl in cfg.ratelimits.levels) for t in ("high", "normal")}
            try:
                w, sg_notes = servegen(data_root, days=days, seed=seed, cold_start_s=cold_s, tight_limits=tight,
                                       gpus_per_node=cfg.cluster.gpus_per_node)
            except OSError as exc:
                _fail(f"cannot read the servegen trace: {exc}", 1)
            except ValueError as exc:
                _fail(f"servegen: {exc}", 1)
            own_notes = {"inference": {"cold_start_s": cold_s, **sg_notes.to_dict()}}
        else:
            try:
                w = workloads.helios(data_root, days=days, high_vcs=2 if high_vcs is None else high_vcs,
                                     high_vc_names=high_vc or None) if trace == "helios" \
                    else workloads.alibaba(data_root, days=days)
            except OSError as exc:
                _fail(f"cannot read the {trace} trace: {exc}", 1)
            except ValueError as exc:
                _fail(f"--high-vc/--high-vcs: {exc}")
        try:  # request volume for the throttling account follows the Azure LLM trace's minute-by-minute shape
            w.request_shape = workloads.azure_shape(data_root)
        except OSError:
            click.echo("Azure trace not found: request volume is flat", err=True)
        if "predictive" in chosen:
            from daemon.forecasting.choose import in_use

            try:  # the manifest's in-use model, if it was scored on the simulator; else the daily seasonal naive
                sim_cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"kind": "simulator"})})
                model, _ = in_use(sim_cfg)
                click.echo(f"predictive uses {model.name}", err=True)
            except ModelError as exc:
                model = SeasonalNaive(cfg.forecaster.season_steps, cfg.forecaster.quantiles)
                click.echo(f"predictive uses {model.name} ({exc})", err=True)
        steps = min(int(days * 1440), len(w.demand) - w.start - 1)
    if slo is not None:
        _min_gpus(w, cfg, model, steps, chosen, slo, forecast_every, out)
        return
    # the settings run in one forked process per core (the meters are the same as in one process)
    runs = run_replay(w, cfg, model, steps=steps, strategies=chosen,
                      settings=default_sweep(chosen) if sweep else None, forecast_every=forecast_every,
                      progress=True, workers=workers or replay_workers())
    meta = {"workload": w.name, "tenants": len(w.tiers), "capacity": w.capacity, "gpus_per_node": w.gpus_per_node,
            "steps": steps, "forecaster": getattr(model, "name", None),
            "high_tier": sorted(str(c) for c, t in zip(w.demand.columns, w.tiers) if t == "high")}
    if w.inference:
        meta.update(own_notes)
    if own:
        meta.update({"source": str(data) if data is not None else where,
                     "window": [str(w.demand.index[w.start]), str(w.demand.index[-1])],
                     "history_steps_before": int(w.start), "forecaster_choice": choice_note, **own_notes})
        if w.accepts is not None:  # replayed on the [fleet] pools: the fleet and what each tenant accepted
            meta["fleet"] = {"pools": [p.model_dump() for p in cfg.fleet.pools],
                             "accepts": {str(c): "|".join(a) or "any" for c, a in zip(w.demand.columns, w.accepts)}}
    path = out / f"{w.name}.json"
    with phase("writing the report and the figure"):
        doc = report.to_json(runs, meta, path)
        step_days = (w.demand.index[1] - w.demand.index[0]).total_seconds() / 86400
        png = report.pareto_figure(runs, out / f"{w.name}.png",
                                   report.replay_title(w.name, len(w.tiers), w.capacity, steps * step_days))
    recommendation = None
    if recommend_:
        try:
            recommendation = rec.recommend(doc, obj)
        except rec.ObjectiveError as exc:
            _fail(f"recommend: {exc}", 1)
        doc["recommendation"] = recommendation
        path.write_text(json.dumps(doc, indent=2) + "\n")
    for line in terminal.replay_lines(doc, recommendation, sweep=sweep, table=show_table, legend=legend,
                                      json_path=str(path)):
        click.echo(line)
    click.echo(f"wrote {path} and {png}")


def _slo(min_gpus: bool, high: float | None, normal: float | None, sweep: bool):
    """simulate's SLO for --min-gpus (None without it); a bad share or a flag without --min-gpus is one line."""
    from daemon.sim.sizing import SLO, slo_error

    if not min_gpus:
        if high is not None or normal is not None:
            _fail("--slo-high and --slo-normal go with --min-gpus")
        return None
    if sweep:
        _fail("--min-gpus sizes each strategy at one setting: not with --sweep or --recommend")
    slo = SLO()
    for flag, v in (("--slo-high", high), ("--slo-normal", normal)):
        why = None if v is None else slo_error(flag, v)
        if why is not None:
            _fail(why)
    return SLO(high=slo.high if high is None else high, normal=slo.normal if normal is None else normal,
               high_requests=slo.high_requests if high is None else high)


def _min_gpus(w, cfg: Config, model, steps: int, chosen: tuple[str, ...], slo, forecast_every: int, out: Path) -> None:
    """simulate --min-gpus: each strategy's smallest cluster for the SLO, one line each and predictive's savings;
    the JSON (every size tried) under --out."""
    from daemon.sim import sizing

    try:
        found = sizing.size_all(w, cfg, model, steps=steps, strategies=chosen, slo=slo, forecast_every=forecast_every,
                                progress=lambda line: click.echo(line, err=True))
    except ValueError as exc:
        _fail(f"simulate --min-gpus: {exc}", 1)
    doc = {"workload": w.name, "steps": steps, "gpus_per_node": w.gpus_per_node, "own_nodes": sizing.node_count(w),
           "slo": dataclasses.asdict(slo), "forecaster": getattr(model, "name", None),
           "strategies": {s: z.summary() for s, z in found.items()}, "savings": sizing.savings(found)}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{w.name}_min_gpus.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    click.echo(f"the smallest cluster meeting the SLO (high tier <= {slo.high:.2%} unmet, normal <= "
               f"{slo.normal:.2%}) over {steps} steps of {w.name}:")
    for line in sizing.lines(found):
        click.echo(line)
    click.echo(f"wrote {path}")

def _duration_s(text: str, flag: str) -> float:
    """Seconds of a duration written as ``90s``, ``3m`` / ``3min`` or ``1h`` (one line naming the flag if not)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)\s*", text)
    if m is None:
        _fail(f"{flag} {text!r}: a duration with its unit, e.g. 90s, 3m or 1h")
    return float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


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
              "actuators.dry_run = true (and state.shadow_records), on the acting replica", 1)
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
