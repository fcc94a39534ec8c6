"""``gpu-autoscaler simulate``: replay a built-in trace or this cluster's own history through the strategies, or
size the cluster each strategy needs for one SLO (--min-gpus). Its own module because it is the largest command;
daemon/cli.py adds it to the group."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import click

from daemon.cli_common import _as_sim, _fail, _load
from daemon.config import Config
from daemon.text import agree, plural


def _objective_opts(f):
    f = click.option("--minimize", default=None, metavar="METRIC",
                     help="Recommendation: the figure to minimize  [default: high_unmet]")(f)
    f = click.option("--subject-to", "subject_to", multiple=True, metavar="CONSTRAINT",
                     help="Recommendation, repeatable: e.g. 'normal_unmet<=reactive', 'preemptions<=1.5*reactive', "
                          "'utilization>=0.8'  [default: normal_unmet<=reactive and preemptions<=reactive]")(f)
    return f


@click.command()
@click.option("--trace", type=click.Choice(["synthetic", "helios", "alibaba", "servegen"]), default="synthetic",
              show_default=True, help="servegen: the 43 ServeGen m-small LLM API clients as inference services "
                                      "(requests in, replicas out) beside synthetic batch tenants")
@click.option("--cold-start", "cold_start", default=None, metavar="DURATION",
              help="servegen: seconds from a replica's placement to its first served request, e.g. 3m or 90s  "
                   "[default: 3m]")
@click.option("--scale-down-stabilization", "stabilization", default=None, metavar="DURATION",
              help="servegen: the services' HPA scale-down stabilization window, e.g. 5m or 0s (scale down at once; "
                   "replicas are the max of the window's recommendations)  [default: 300s]")
@click.option("--arrivals", type=click.Choice(["moments", "fitted"]), default=None,
              help="servegen: each minute's requests drawn from its 10-minute window's rate and CV (moments), or "
                   "each request from the window's fitted Gamma or Weibull inter-arrivals, as ServeGen's own "
                   "generator draws them (fitted: about 10 s more per day)  [default: moments]")
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
def simulate(ctx, trace, cold_start, stabilization, arrivals, data, from_source, history_days, until, tier_flags,
             job_flags, default_job_gpus, quick_forecaster, epochs, recommend_, minimize, subject_to, tenants, gpus,
             days, seed, strategies, sweep, show_table, legend, forecast_every, high_vcs, high_vc, data_dir, workers,
             out, min_gpus, slo_high, slo_normal) -> None:
    """Replay a trace (built-in, or this cluster's own history with --data/--from-source) through static, reactive,
    predictive and perfect-forecast strategies on the same physics."""
    cfg = _load(ctx)
    from daemon.forecasting.retrain import DataError, default_data_dir
    from daemon.sim import recommend as rec, report, terminal, workloads
    from daemon.sim.replay import STRATEGIES, ReplayWorkerError, default_sweep, replay_workers, run_replay
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
    if arrivals is not None and (trace != "servegen" or own):
        _fail("--arrivals is how the inference services' requests are drawn: use it with --trace servegen")
    stab_s = 300.0
    if stabilization is not None:
        if trace != "servegen" or own:
            _fail("--scale-down-stabilization is the inference services' HPA window: use it with --trace servegen "
                  "(for --data, [tenants.inference] scale_down_stabilization_s)")
        stab_s = _duration_s(stabilization, "--scale-down-stabilization")
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
            known = None   # the tiers and job sizes the source itself knows: the embedded simulator's tenants'
            if data is not None:
                frame, where = own_mod.read_file(data, cfg), str(data)
            else:
                season_days = cfg.forecaster.season_steps * cfg.cycle.resolution_s / 86400
                hist = history_days if history_days is not None else season_days + 1.0
                frame, where = own_mod.read_source(cfg, days + hist, until=until_s)
                click.echo(f"history from the {where}", err=True)
                if cfg.source.kind == "simulator":
                    known = own_mod.simulator_settings(cfg, days + hist)
            w, own_notes = own_mod.own_workload(frame, cfg, days=days, step_s=cfg.cycle.resolution_s, where=where,
                                                tier_flags=tiers_f, job_flags=jobs_f,
                                                default_job_gpus=default_job_gpus,
                                                name=f"own-{data.stem}" if data is not None else "own-source",
                                                source=known)
            if not own_notes["contention"]["contends"]:  # every strategy would give the same figures
                if recommend_:
                    raise DataError(own_notes["contention"]["message"])
                click.echo(f"WARNING: {own_notes['contention']['message']}", err=True)
            if own_notes["gaps"] is not None:
                click.echo(f"WARNING: {where}: {own_notes['gaps']['message']}", err=True)
            absent = own_notes["tenants_not_in_data"]
            if absent:  # a name in the config the file spells otherwise: its column is in the unnamed line below
                it = "the file" if data is not None else "the source"
                names = ", ".join(absent[:6])
                click.echo(f"{plural(len(absent), 'tenant')} named in the config or flags "
                           f"{agree(len(absent), 'has', 'have')} no series in {it}, not replayed: {names}"
                           + (f" (+{len(absent) - 6} more)" if len(absent) > 6 else ""), err=True)
            unnamed = own_notes["tenants_unnamed"]
            if unnamed:  # all of them counted, the first six named
                more = f" (+{len(unnamed) - 6} more)" if len(unnamed) > 6 else ""
                click.echo(f"{plural(len(unnamed), 'tenant')} not named in the config or flags "
                           f"{agree(len(unnamed), 'is', 'are')} replayed as tier normal with {default_job_gpus}-GPU "
                           f"jobs: {', '.join(unnamed[:6])}{more}", err=True)
            if "predictive" in chosen:
                # the start-up selection logs every candidate's score in one long line: here they go to the JSON
                quiet = logging.getLogger("gpu_autoscaler.selection")
                level = quiet.level
                quiet.setLevel(max(level, logging.WARNING))
                try:
                    c = own_mod.choose_forecaster(w.demand.iloc[: w.start], cfg, cfg.cycle.resolution_s,
                                                  quick=quick_forecaster, epochs=epochs, progress=True,
                                                  services=list(w.inference or ()))
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
                                       gpus_per_node=cfg.cluster.gpus_per_node, scale_down_stabilization_s=stab_s,
                                       arrivals=arrivals or "moments")
            except OSError as exc:
                _fail(f"cannot read the servegen trace: {exc}", 1)
            except ValueError as exc:
                _fail(f"servegen: {exc}", 1)
            own_notes = {"inference": {"cold_start_s": cold_s, "arrivals": arrivals or "moments",
                                       **sg_notes.to_dict()}}
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
                sim_cfg = _as_sim(cfg)
                model, _ = in_use(sim_cfg)
                click.echo(f"predictive uses {model.name}", err=True)
            except ModelError as exc:
                model = SeasonalNaive(cfg.forecaster.season_steps, cfg.forecaster.quantiles)
                click.echo(f"predictive uses {model.name} ({exc})", err=True)
            if w.inference:  # the services on their window means, as the daemon forecasts them (forecaster.services)
                from daemon.forecasting.services import with_services

                model, svc_note = with_services(cfg, model, list(w.inference), background=False)
                if svc_note:
                    click.echo(f"predictive: {svc_note}", err=True)
        steps = min(int(days * 1440), len(w.demand) - w.start - 1)
        if slo is None and not w.inference and w.accepts is None:
            own_notes = _builtin_contention(w, cfg, steps, days, trace, recommend_) or own_notes
    if slo is not None:
        _min_gpus(w, cfg, model, steps, chosen, slo, forecast_every, out, own_data=data is not None)
        return
    # the settings run in one forked process per core (the meters are the same as in one process)
    try:
        runs = run_replay(w, cfg, model, steps=steps, strategies=chosen,
                          settings=default_sweep(chosen) if sweep else None, forecast_every=forecast_every,
                          progress=True, workers=workers or replay_workers())
    except ReplayWorkerError as exc:  # a worker died or hung: which one, and what it ran (--workers 1 runs here)
        _fail(f"{exc}; --workers 1 runs every setting in this process", 1)
    meta = {"workload": w.name, "tenants": len(w.tiers), "capacity": w.capacity, "gpus_per_node": w.gpus_per_node,
            "steps": steps, "forecaster": getattr(model, "name", None),
            "high_tier": sorted(str(c) for c, t in zip(w.demand.columns, w.tiers) if t == "high")}
    if w.inference or "contention" in own_notes:
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
            if recommendation["predictive_helps"]:  # is the gain more than one replay's noise? (two more replays)
                doc["noise_replay"] = _noise_replay(w, cfg, model, steps, doc, recommendation, forecast_every,
                                                    workers or replay_workers())
                if doc["noise_replay"] is not None:
                    recommendation = rec.recommend(doc, obj)
                else:
                    del doc["noise_replay"]
        except rec.ObjectiveError as exc:
            _fail(f"recommend: {exc}", 1)
        except ReplayWorkerError as exc:
            _fail(f"{exc}; --workers 1 runs every setting in this process", 1)
        doc["recommendation"] = recommendation
        path.write_text(json.dumps(doc, indent=2) + "\n")
    for line in terminal.replay_lines(doc, recommendation, sweep=sweep, table=show_table, legend=legend,
                                      json_path=str(path)):
        click.echo(line)
    click.echo(f"wrote {path} and {png}")


def _noise_replay(w, cfg, model, steps: int, doc: dict, recommendation: dict, forecast_every: int,
                  workers: int) -> dict | None:
    """The recommended predictive setting and reactive's point replayed once more on the history changed by next to
    nothing (daemon/sim/noise.py: one more job of one tenant at the window's first step): how far they move is the
    noise of one replay, which recommend weighs the gain against. None where nothing can be nudged."""
    from daemon.sim.noise import nudged
    from daemon.sim.replay import run_replay

    got = nudged(w)
    if got is None:
        click.echo("the noise of one replay cannot be measured: no tenant's demand is known at the window's first step",
                   err=True)
        return None
    w2, nudge = got
    by = {x["label"]: x for x in doc["runs"]}
    labels = [recommendation["reactive"]["label"], recommendation["recommended"]]
    settings = [(by[x]["strategy"], dict(by[x]["knobs"])) for x in labels]
    click.echo(f"the noise of one replay: {len(settings)} more replays ({', '.join(labels)}) with {nudge.text()}",
               err=True)
    runs = run_replay(w2, cfg, model, steps=steps, settings=settings, forecast_every=forecast_every, progress=True,
                      workers=min(workers, len(settings)))
    return {"perturbation": nudge.to_dict(), "runs": [m.summary() for m in runs]}


def _builtin_contention(w, cfg, steps: int, days: float, trace: str, recommend_: bool) -> dict | None:
    """A built-in trace's replayed window whose demand never contends for GPUs (a short --days of the synthetic
    night): every strategy serves it all and every figure is 0. Said on one WARNING line and kept in the JSON's
    `contention`, so that `recommend` on it refuses, as for one's own history (daemon/sim/contention.py); with
    --recommend, refused at once. None when it contends."""
    from daemon.sim.contention import check

    share = cfg.policy.reserve_share
    c = check(w.demand.iloc[w.start:w.start + steps], int(w.capacity), share, gpus_per_node=w.gpus_per_node)
    if c.contends:
        return None
    more = "more --days" + (" or fewer --gpus" if trace == "synthetic" else "")
    msg = (f"{w.name}, {days:g} days replayed: demand never contends for GPUs: its peak, {c.peak_gpus} GPUs at "
           f"{c.peak_at}, stays within the {c.free_gpus} the cluster's {c.capacity} leave beside the high tier's pool "
           f"(policy.reserve_share {share:g}), so every strategy serves it all and the replay cannot tell them apart; "
           f"no recommendation. Replay {more}")
    if recommend_:
        _fail(f"simulate: {msg}", 1)
    click.echo(f"WARNING: {msg}", err=True)
    return {"contention": {**c.to_dict(), "message": msg}}


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


def _min_gpus(w, cfg: Config, model, steps: int, chosen: tuple[str, ...], slo, forecast_every: int, out: Path, *,
              own_data: bool = False) -> None:
    """simulate --min-gpus: each strategy's smallest cluster for the SLO, one line each and predictive's savings;
    the JSON (every size tried) under --out. Where a strategy never meets it (its services' throttled floor), one
    more line says which knobs move that floor: `own_data` (--data) names the config's, else the trace's flag."""
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
    # where services' requests were replayed the SLO also bounds the high tier's throttled requests: say so, as
    # each strategy's line gives that share and a miss on it alone is a miss
    reqs = any(t.figures.get("high_throttled_share") is not None for z in found.values() for t in z.tries)
    click.echo(f"the smallest cluster meeting the SLO (high tier <= {slo.high:.2%} unmet"
               + (f" and <= {slo.high_requests:.2%} of its requests throttled" if reqs else "")
               + f", normal <= {slo.normal:.2%}) over {steps} steps of {w.name}:")
    for line in sizing.lines(found):
        click.echo(line)
    never = [s for s, z in found.items() if z.found is None and z.floor() is not None]
    if never:
        knobs = ("a larger `headroom` or `scale_down_stabilization_s` in each service's [tenants.inference]" if own_data
                 else "a longer --scale-down-stabilization")
        click.echo(f"{' and '.join(never)}: no size meets the SLO at these service settings, since each rise is "
                   f"served one cold start late; replicas started ahead of it are what moves that: try {knobs} "
                   "(bench/sizing_bench.py sizes every strategy over HPA headrooms 0.5 to 10: docs/replay.md)")
    click.echo(f"wrote {path}")

def _duration_s(text: str, flag: str) -> float:
    """Seconds of a duration written as ``90s``, ``3m`` / ``3min`` or ``1h`` (one line naming the flag if not)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)\s*", text)
    if m is None:
        _fail(f"{flag} {text!r}: a duration with its unit, e.g. 90s, 3m or 1h")
    return float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
