"""The recurring-windows benchmark (issue 39, item 4, windows): on synthetic (40 tenants, 1,024 GPUs, seed 7), the
windows the product proposes from the 7 days before the measured window (daemon/forecasting/windows_proposed.py),
replayed with the predictive strategy, against predictive without windows and the perfect forecast without them.

Measured per run: the high tier's unmet GPU-minutes at the 14:00 tenants (high-tier tenants the generator gave the
14:00 peak; per tenant, GPUs queued after each step), the normal tier's unmet and the preemptions (the replay's
meter), and the GPU-minutes held idle (held GPUs above the holder's use, every tenant). Target (bench/targets.py
WINDOWS): the proposed windows cut the 14:00 tenants' high-tier unmet by >= 80% against predictive without windows,
at no more normal-tier unmet and no more preemptions. Each windowed run is replayed twice: as Kueue carries a window
out (the tenant's hold from the lead time; the GPUs lent before) and as Slurm does, with the reservation made ahead
(``_on_slurm``: ``actuators.slurm.windows_reserved = "ahead"``, on which no job starts until it is active) and made
at the lead time (``_on_slurm_at_lead``, the default: the nodes lent before), never on the pool's nodes
(daemon/sim/cluster_holds.py _ahead); the GPUs a Slurm window's reservation keeps free before it is active count as
held idle. For each windowed run,
``while_window_holds`` says per step why a 14:00 tenant still waited while its window held
(daemon/sim/windows_breakdown.py), and sums the GPU-minutes per cause; ``normal_unmet_delta`` splits the normal
tier's unmet (the meter's: demand not served) against predictive without windows, step by step, into the steps
where one of the run's windows held (from its lead time to its end) and the others.

One more run is the noise of one replay (``predictive_with_a_null_window``): one window of 8 GPUs (one node) for 15
minutes at 03:00 UTC, for a high-tier tenant without the 14:00 peak, hours from any peak. It asks for next to
nothing, yet it moves where jobs land and what is preempted, and from there the rest of the day: what it moves
each measure by is how far apart two replays can land for reasons that have nothing to do with the 14:00 windows.

    nice -n 10 python bench/windows_bench.py [--days 1] [--quick-forecaster] [--seed 7] [--out bench/out]

Another seed than 7 (the generator's draw of tenants, peaks and bursts) writes windows_synthetic_seed<N>.json beside
it, to show the result is not one draw's.

    nice -n 10 python bench/windows_bench.py --days 1 --quick-forecaster --seeds 2,3,4,5,7,12,13

replays several draws and writes windows_synthetic_seeds.json (never the per-seed files): per seed, only the two
runs the target compares (predictive without windows, and with the high tier's proposed windows as Kueue carries
them out, the published row), the target's three conditions, and the pooled figures (``pool``): a verdict on one
draw is within the noise of one replay, one over several draws is less so. A seed whose 14:00 tenants have no
high-tier unmet without windows has nothing to cut: it is skipped (``skipped``, with why), not counted. Each seed's
``why`` (``explain``) says where its 14:00 tenants' unmet falls against the windows (without and with them), why
they waited while a window held (per cause), and what each window's nodes carried when first held, against where
the tenant's jobs fit in the whole cluster then; ``pool["why"]`` sums the places and causes.

    nice -n 10 python bench/windows_bench.py --days 1 --quick-forecaster --seeds 2,3,4,5,7,12,13 --leads 30,120,240

replays the same draws with the high tier's proposed windows at each lead time (reclaim_before) in turn, pooled per
lead, into windows_synthetic_leads.json: what a longer lead buys on the 14:00 tenants and what it costs the normal
tier and in GPUs held idle.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import provenance  # noqa: E402  (bench/, next to this script)
import targets  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.config.windows import WindowConfig  # noqa: E402
from daemon.forecasting.windows_proposed import SIGNIFICANCE, propose  # noqa: E402
from daemon.sim import workloads  # noqa: E402
from daemon.sim.own import choose_forecaster  # noqa: E402
from daemon.sim.replay import ForecastBank  # noqa: E402
from daemon.sim.windows_breakdown import CAUSES, WindowBreakdown, window_in_place  # noqa: E402
from daemon.sim.windows_evidence import replay, with_windows  # noqa: E402

SEED, TENANTS, GPUS, HISTORY_DAYS = 7, 40, 1024, 7
KEY = "high_unmet_gpu_min_at_1400_tenants"   # the target's measure


def left_steps(run, w, peaked_high: list[str], windows: list[WindowConfig], min_lead_s: float) -> list[dict]:
    """Each measured step where a 14:00 tenant still queued GPUs: when, who, how many, its demand then, and where
    that step falls against its window ("none": it has none; "outside" it, with the minutes to its next lead time;
    "lead": held, not open yet; "open"), so that what is left can be told apart from what a window could hold."""
    cols = [list(w.demand.columns).index(t) for t in peaked_high]
    times = w.demand.index[w.start: w.start + len(run.unmet_by_step)]
    out = []
    for i, j in zip(*np.nonzero(run.unmet_by_step[:, cols])):
        t, now = peaked_high[j], times[i].to_pydatetime()
        now = now if now.tzinfo is not None else now.replace(tzinfo=dt.timezone.utc)
        mine = [x for x in windows if x.tenant == t]
        got = window_in_place(mine, now, min_lead_s)
        where = got[1] if got else ("none" if not mine else "outside")
        leads = [(x.occurrence(now) - x.held_lead(min_lead_s) - now).total_seconds() / 60 for x in mine
                 if x.occurrence(now)]
        out.append({"at": f"{now:%H:%M}", "tenant": t, "queued_gpus": float(run.unmet_by_step[i, cols[j]]),
                    "demand_gpus": float(w.demand.iloc[w.start + i, cols[j]]), "window": where,
                    "minutes_to_lead": round(min(leads)) if where == "outside" and leads else None})
    return out


def in_place(windows: list[WindowConfig], times, min_lead_s: float) -> np.ndarray:
    """Per measured step: whether one of `windows` is held then (from its lead time to its end)."""
    out = np.zeros(len(times), dtype=bool)
    for i, t in enumerate(times):
        now = t.to_pydatetime()
        now = now if now.tzinfo is not None else now.replace(tzinfo=dt.timezone.utc)
        out[i] = window_in_place(windows, now, min_lead_s) is not None
    return out


def measure(run, w, peaked_high: list[str]) -> dict:
    s = run.meter.summary()
    cols = [list(w.demand.columns).index(t) for t in peaked_high]
    times = w.demand.index[w.start: w.start + len(run.unmet_by_step)]
    near = np.asarray((times.hour >= 12) & (times.hour < 16))
    at_peak = float(run.unmet_by_step[near][:, cols].sum() * run.meter.step_min)
    return {"high_unmet_gpu_min_at_1400_tenants": round(sum(run.unmet_gpu_min[t] for t in peaked_high), 1),
            "of_which_12_16_utc": round(at_peak, 1),
            "high_unmet_gpu_min": s["tiers"]["high"]["unmet_gpu_min"],
            "normal_unmet_gpu_min": s["tiers"]["normal"]["unmet_gpu_min"],
            "low_unmet_gpu_min": s["tiers"]["low"]["unmet_gpu_min"],
            "preemptions": s["preemptions"], "utilization": round(s["utilization"], 4),
            "held_idle_gpu_min": round(sum(run.held_idle_gpu_min.values()), 1),
            "wall_s": round(s["wall_s"], 1)}


class Draw:
    """One draw of the generator, made ready to replay: the workload, its 14:00 tenants, the windows proposed from
    the 7 days of history (``variants``: the high tier's, the high and normal tiers') and the forecaster chosen."""

    def __init__(self, seed: int, days: float, quick: bool):
        per_day = 1440
        self.hist, self.steps = HISTORY_DAYS * per_day, int(days * per_day)
        g = workloads.generate(TENANTS, self.hist + self.steps + 61, GPUS, seed=seed, target_load=1.0)
        self.g = g
        self.w = w = workloads.Workload(f"synthetic-{TENANTS}x{GPUS}", g.demand, g.tiers, g.job_gpus, GPUS, self.hist)
        self.tenants = tenants = [str(c) for c in w.demand.columns]
        self.peaked_high = [t for t, tier, p in zip(tenants, w.tiers, g.peaked) if tier == "high" and p]
        self.cfg = Config()
        t0 = time.perf_counter()
        self.props = propose(w.demand.iloc[:self.hist], timezone="UTC")
        self.propose_s = time.perf_counter() - t0
        self.tier_of = tier_of = dict(zip(tenants, w.tiers))
        self.variants = {
            "high": [p.to_window() for p in self.props if tier_of[p.tenant] == "high"],
            "high_normal": [p.to_window() for p in self.props if tier_of[p.tenant] in ("high", "normal")]}
        t1 = time.perf_counter()
        self.choice = choose_forecaster(w.demand.iloc[:self.hist], self.cfg, 60, quick=quick)
        self.fit_s = time.perf_counter() - t1

    def bank(self) -> ForecastBank:
        return ForecastBank(self.choice.model, self.w.demand, 1, self.cfg.cycle.horizon_steps,
                            self.cfg.cycle.history_steps, keep=False, prefetch=True, stop=self.w.start + self.steps)

    def look(self, variant: str) -> WindowBreakdown:
        """The replay hook that says why a 14:00 tenant waited while one of the `variant` windows held."""
        return WindowBreakdown(len(self.tenants), self.tenants,
                               [WindowConfig.model_validate(x) for x in self.variants[variant]], self.peaked_high,
                               self.cfg.window_min_lead_s())

    def run(self, strategy: str, ws: list[dict], base_cfg: Config, look=None):
        b = self.bank() if strategy == "predictive" else None
        try:
            return replay(self.w, with_windows(base_cfg, ws), strategy, steps=self.steps, bank=b, hook=look)
        finally:
            if b is not None:
                b.close()


def judge(base: dict, win: dict, target: dict) -> dict:
    """The target's verdict on a windowed run against predictive without windows (both ``measure``'s)."""
    cut = 1 - win[KEY] / base[KEY] if base[KEY] > 0 else None
    met = (cut is not None and cut >= target["cut"]
           and win["normal_unmet_gpu_min"] <= base["normal_unmet_gpu_min"]
           and win["preemptions"] <= base["preemptions"])
    return {"met": bool(met), "cut": None if cut is None else round(cut, 4),
            "normal_unmet_delta_gpu_min": round(win["normal_unmet_gpu_min"] - base["normal_unmet_gpu_min"], 1),
            "preemptions_delta": win["preemptions"] - base["preemptions"]}


def seed_row(seed: int, base: dict, win: dict, target: dict) -> dict:
    """One draw of the multi-seed view: the 14:00 tenants' high-tier unmet without and with the high tier's
    windows, the cut, the changes in the normal tier's unmet and the preemptions, the GPU-minutes held idle, and
    each of the target's three conditions."""
    v = judge(base, win, target)
    conditions = {"cut": v["cut"] is not None and v["cut"] >= target["cut"],
                  "normal_unmet": v["normal_unmet_delta_gpu_min"] <= 0, "preemptions": v["preemptions_delta"] <= 0}
    return {"seed": seed, "high_unmet_at_1400_tenants_without": base[KEY], "high_unmet_at_1400_tenants_with": win[KEY],
            "cut": v["cut"], "normal_unmet_without": base["normal_unmet_gpu_min"],
            "normal_unmet_with": win["normal_unmet_gpu_min"],
            "normal_unmet_delta_gpu_min": v["normal_unmet_delta_gpu_min"],
            "preemptions_without": base["preemptions"], "preemptions_with": win["preemptions"],
            "preemptions_delta": v["preemptions_delta"], "held_idle_gpu_min_without": base["held_idle_gpu_min"],
            "held_idle_gpu_min_with": win["held_idle_gpu_min"],
            "conditions": conditions | {"all": all(conditions.values())}}


def pool(rows: list[dict], target: dict) -> dict:
    """The seeds' rows pooled: the cut of the summed unmet (1 - sum(with) / sum(without)), the summed changes and
    held idle, each condition on those sums, and how many seeds meet each condition and all three."""
    without = sum(r["high_unmet_at_1400_tenants_without"] for r in rows)
    with_ = sum(r["high_unmet_at_1400_tenants_with"] for r in rows)
    cut = round(1 - with_ / without, 4) if without > 0 else None
    normal = round(sum(r["normal_unmet_delta_gpu_min"] for r in rows), 1)
    pre = sum(r["preemptions_delta"] for r in rows)
    conditions = {"cut": cut is not None and cut >= target["cut"], "normal_unmet": normal <= 0, "preemptions": pre <= 0}
    why = {}
    if rows and all("why" in r for r in rows):   # --seeds: where the unmet falls and why, summed
        why = {"why": {"left_gpu_min_by_place": {
                           k: {p: round(sum(r["why"]["left_gpu_min_by_place"][k][p] for r in rows), 1) for p in PLACES}
                           for k in ("without", "with")},
                       "while_window_holds_gpu_min_by_cause": {
                           c: round(sum(r["why"]["while_window_holds_gpu_min_by_cause"].get(c, 0.0) for r in rows), 1)
                           for c in CAUSES}}}
    return why | {"seeds": len(rows), "high_unmet_at_1400_tenants_without": round(without, 1),
            "high_unmet_at_1400_tenants_with": round(with_, 1), "cut": cut, "normal_unmet_delta_gpu_min": normal,
            "preemptions_delta": pre,
            "held_idle_gpu_min_without": round(sum(r["held_idle_gpu_min_without"] for r in rows), 1),
            "held_idle_gpu_min_with": round(sum(r["held_idle_gpu_min_with"] for r in rows), 1),
            "conditions": conditions | {"all": all(conditions.values())},
            "seeds_meeting": {c: sum(r["conditions"][c] for r in rows)
                              for c in ("cut", "normal_unmet", "preemptions", "all")}}


PLACES = ("outside", "lead", "open", "none")   # left_steps' "window": where a step falls against the tenant's windows


def by_place(left: list[dict], step_min: float) -> dict:
    """The GPU-minutes of ``left_steps`` per place against the windows: outside them, in their lead, open (or
    "none": a tenant without a window)."""
    out = dict.fromkeys(PLACES, 0.0)
    for x in left:
        out[x["window"]] += x["queued_gpus"] * step_min
    return {k: round(v, 1) for k, v in out.items()}


def explain(d: "Draw", base_run, win_run, look: WindowBreakdown) -> dict:
    """Why one draw's windows cut what they cut: where the 14:00 tenants' unmet falls against the high tier's
    windows, without and with them (``left_gpu_min_by_place``, the same windows' times for both runs); the
    GPU-minutes queued while a window held, per cause (daemon/sim/windows_breakdown.py, the windowed run); and
    what each window's nodes carried when its hold was first in place and when it opened (``window_nodes``)."""
    ws = [WindowConfig.model_validate(x) for x in d.variants["high"]]
    lead = d.cfg.window_min_lead_s()
    s = look.summary(win_run.meter.step_min)
    return {"left_gpu_min_by_place": {
                "without": by_place(left_steps(base_run, d.w, d.peaked_high, ws, lead), base_run.meter.step_min),
                "with": by_place(left_steps(win_run, d.w, d.peaked_high, ws, lead), win_run.meter.step_min)},
            "while_window_holds_gpu_min_by_cause": s["gpu_min_by_cause"],
            "while_window_holds_gpu_min_by_tenant": s["gpu_min_by_tenant"],
            "window_nodes": s["window_nodes"]}


def several(a) -> int:
    """--seeds: per draw, predictive without windows and with the high tier's proposed windows (Kueue's way)."""
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    out, target = provenance.started(), targets.WINDOWS
    rows, skipped, step_min = [], [], None
    for seed in seeds:
        t0 = time.perf_counter()
        d = Draw(seed, a.days, a.quick_forecaster)
        base_run = d.run("predictive", [], d.cfg)
        base, step_min = measure(base_run, d.w, d.peaked_high), base_run.meter.step_min
        about = {"seed": seed, "tenants_with_1400_peak_high": d.peaked_high, "forecaster": d.choice.name,
                 "high_tier_windows": d.variants["high"]}
        if base[KEY] <= 0:
            why = ("no high-tier tenant has the 14:00 peak" if not d.peaked_high else
                   "its 14:00 tenants have no high-tier unmet without windows: nothing to cut")
            skipped.append(about | {"why": why})
            print(f"seed {seed}: skipped, {why}", flush=True)
            continue
        look = d.look("high")
        win_run = d.run("predictive", d.variants["high"], d.cfg, look)
        win = measure(win_run, d.w, d.peaked_high)
        rows.append(about | seed_row(seed, base, win, target) | {"why": explain(d, base_run, win_run, look)}
                    | {"wall_s": round(time.perf_counter() - t0, 1)})
        print(f"seed {seed}:", {k: v for k, v in rows[-1].items() if k not in ("high_tier_windows", "why")},
              rows[-1]["why"]["left_gpu_min_by_place"], rows[-1]["why"]["while_window_holds_gpu_min_by_cause"],
              flush=True)
    out.update({"workload": f"synthetic-{TENANTS}x{GPUS}", "seeds": seeds, "step_minutes": step_min,
                "history_days": HISTORY_DAYS, "measured_days": a.days,
                "forecaster_choice": "quick (baselines only)" if a.quick_forecaster else "as retrain chooses",
                "compared": {"without": "predictive, no windows",
                             "with": "predictive + the high tier's proposed windows, as Kueue carries them out"},
                "per_seed": rows, "skipped": skipped, "pool": pool(rows, target), "target": target})
    provenance.finished(out)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "windows_synthetic_seeds.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}: {out['pool']}")
    return 0


def leads(a) -> int:
    """--seeds with --leads: per draw, predictive without windows and with the high tier's proposed windows, each
    proposal's reclaim_before set to every lead in turn (30 min is the proposals' own), as Kueue carries them out.
    What a longer lead buys on the 14:00 tenants and what it costs the normal tier (a hold's nodes are the tenant's
    from its lead time: nothing else new starts there) and in GPU-minutes held idle: the price of the cut on the
    draws whose 14:00 tenants take whole nodes, where the other tiers' work that cannot be preempted keeps the
    window's nodes at the proposals' lead (seeds 4 and 13)."""
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    try:
        minutes = sorted({int(x) for x in a.leads.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--leads: give minutes separated by commas, not {a.leads!r}") from None
    if not minutes or minutes[0] <= 0:
        raise SystemExit(f"--leads: each lead is a positive number of minutes, got {a.leads!r}")
    out, target = provenance.started(), targets.WINDOWS
    per_lead: dict[int, list[dict]] = {m: [] for m in minutes}
    skipped = []
    for seed in seeds:
        d = Draw(seed, a.days, a.quick_forecaster)
        base = measure(d.run("predictive", [], d.cfg), d.w, d.peaked_high)
        if base[KEY] <= 0:
            skipped.append({"seed": seed, "why": "its 14:00 tenants have no high-tier unmet without windows"})
            continue
        for m in minutes:
            ws = [dict(x, reclaim_before_minutes=m) for x in d.variants["high"]]
            win = measure(d.run("predictive", ws, d.cfg), d.w, d.peaked_high)
            per_lead[m].append(seed_row(seed, base, win, target))
            print(f"seed {seed} lead {m} min:", {k: v for k, v in per_lead[m][-1].items()
                                                 if k not in ("conditions",)}, flush=True)
    out.update({"workload": f"synthetic-{TENANTS}x{GPUS}", "seeds": seeds, "leads_minutes": minutes,
                "history_days": HISTORY_DAYS, "measured_days": a.days,
                "forecaster_choice": "quick (baselines only)" if a.quick_forecaster else "as retrain chooses",
                "compared": {"without": "predictive, no windows",
                             "with": "predictive + the high tier's proposed windows with reclaim_before set to the "
                                     "lead, as Kueue carries them out"},
                "by_lead": [{"lead_minutes": m, "per_seed": per_lead[m], "pool": pool(per_lead[m], target)}
                            for m in minutes],
                "skipped": skipped, "target": target})
    provenance.finished(out)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "windows_synthetic_leads.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}: " + "; ".join(f"{x['lead_minutes']} min {x['pool']['cut']}" for x in out["by_lead"]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=1.0, help="measured days after the 7 days of history")
    ap.add_argument("--quick-forecaster", action="store_true",
                    help="the baseline-only choice (no LSTM trained on the history): what a loaded box can finish")
    ap.add_argument("--seed", type=int, default=SEED, help="the synthetic generator's seed (default 7)")
    ap.add_argument("--seeds", default=None,
                    help="several seeds, comma-separated (2,3,4,5,7,12,13): only the target's two runs per seed, "
                         "pooled, into windows_synthetic_seeds.json")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--leads", default=None, metavar="MIN,MIN,...",
                    help="with --seeds: replay the high tier's proposed windows with reclaim_before set to each lead "
                         "(minutes) in turn, into windows_synthetic_leads.json")
    a = ap.parse_args()
    if a.leads is not None:
        if a.seeds is None:
            raise SystemExit("--leads goes with --seeds (the draws to replay at each lead)")
        return leads(a)
    if a.seeds is not None:
        return several(a)
    out = provenance.started()
    d = Draw(a.seed, a.days, a.quick_forecaster)
    w, g, tenants, peaked_high, cfg = d.w, d.g, d.tenants, d.peaked_high, d.cfg
    hist, props, tier_of, variants, choice = d.hist, d.props, d.tier_of, d.variants, d.choice
    fit_s, propose_s = d.fit_s, d.propose_s

    def slurm(reserved: str) -> Config:
        return cfg.model_copy(update={"actuators": cfg.actuators.model_copy(update={
            "enabled": ["slurm"], "slurm": cfg.actuators.slurm.model_copy(update={"windows_reserved": reserved})})})

    on_slurm, at_lead = slurm("ahead"), slurm("at_lead")

    # the noise of one replay: a window that asks next to nothing, hours from any peak (the module docstring)
    other_high = [t for t, tier, p in zip(tenants, w.tiers, g.peaked) if tier == "high" and not p] or peaked_high
    null = [{"name": "null-0300", "tenant": other_high[0], "gpus": 8, "every": "daily", "at": "03:00",
             "timezone": "UTC", "duration_minutes": 15, "reclaim_before_minutes": 30, "borrowable_before": True}]
    normal_by_step: dict[str, np.ndarray] = {}
    held_by_step: dict[str, np.ndarray] = {}
    runs = {}
    for label, strategy, ws, base_cfg in (
            ("predictive", "predictive", [], cfg),
            ("predictive_with_high_tier_windows", "predictive", variants["high"], cfg),
            ("predictive_with_high_and_normal_tier_windows", "predictive", variants["high_normal"], cfg),
            ("predictive_with_high_tier_windows_on_slurm", "predictive", variants["high"], on_slurm),
            ("predictive_with_high_and_normal_tier_windows_on_slurm", "predictive", variants["high_normal"], on_slurm),
            ("predictive_with_high_tier_windows_on_slurm_at_lead", "predictive", variants["high"], at_lead),
            ("predictive_with_high_and_normal_tier_windows_on_slurm_at_lead", "predictive", variants["high_normal"],
             at_lead),
            ("predictive_with_a_null_window", "predictive", null, cfg),
            ("perfect", "perfect", [], cfg)):
        # why a 14:00 tenant still waits while its window holds (daemon/sim/windows_breakdown.py)
        held_from = base_cfg.window_min_lead_s()   # a window is held from WindowConfig.held_lead, as in the plan
        look = WindowBreakdown(len(tenants), tenants, [WindowConfig.model_validate(x) for x in ws],
                               peaked_high, held_from) if ws else None
        run = d.run(strategy, ws, base_cfg, look)
        runs[label] = measure(run, w, peaked_high)
        step_min = run.meter.step_min
        runs[label]["left_at_1400_tenants"] = left_steps(run, w, peaked_high,
                                                         [WindowConfig.model_validate(x) for x in ws], held_from)
        normal_by_step[label] = np.asarray(run.meter.unmet["normal"]) * run.meter.step_min   # the meter's own
        held_by_step[label] = in_place([WindowConfig.model_validate(x) for x in ws],
                                       w.demand.index[w.start: w.start + len(normal_by_step[label])], held_from)
        if look is not None:
            runs[label]["while_window_holds"] = look.summary(run.meter.step_min)
        print(label, runs[label], flush=True)
    base, key, target = runs["predictive"], KEY, targets.WINDOWS
    without = {(x["at"], x["tenant"]) for x in base["left_at_1400_tenants"]}
    for r in runs.values():   # a step where the tenant also queued without windows
        for x in r["left_at_1400_tenants"]:
            x["also_without_windows"] = (x["at"], x["tenant"]) in without

    def judge_(win: dict) -> dict:
        return judge(base, win, target)

    for label, r in runs.items():   # the normal tier's unmet against none, step by step: while a window held, or not
        if label in ("predictive", "perfect"):
            continue
        d, held = normal_by_step[label] - normal_by_step["predictive"], held_by_step[label]
        r["normal_unmet_delta"] = {"while_a_window_held_gpu_min": round(float(d[held].sum()), 1),
                                   "at_other_times_gpu_min": round(float(d[~held].sum()), 1)}

    out.update({
        "workload": w.name, "seed": a.seed, "step_minutes": step_min, "history_days": HISTORY_DAYS,
        "measured_days": a.days,
        "window_start": str(w.demand.index[hist]), "forecaster": choice.name,
        "forecaster_choice": "quick (baselines only)" if a.quick_forecaster else "as retrain chooses",
        "forecaster_fit_seconds": round(fit_s, 1), "propose_seconds": round(propose_s, 1),
        "significance": SIGNIFICANCE.format(min_strength=0.2, noise_sds=2.0, min_days=5, days=7, pre=2.0),
        "tenants_with_1400_peak": {"high": peaked_high, "all": [t for t, p in zip(tenants, g.peaked) if p]},
        "proposals": [p.as_dict() | {"tier": tier_of[p.tenant]} for p in props],
        "accepted": {"high": "the proposals for high-tier tenants",
                     "high_normal": "the proposals for high- and normal-tier tenants (a low-tier tenant's window "
                                    "would hold GPUs for preemptible work)"},
        "windows": variants, "null_window": null[0], "runs": runs, "target": target,
        "noise": judge_(runs["predictive_with_a_null_window"])
        | {"high_unmet_delta_gpu_min_at_1400_tenants": round(
            runs["predictive_with_a_null_window"][key] - base[key], 1)},
        "verdict": {"high": judge_(runs["predictive_with_high_tier_windows"]),
                    "high_normal": judge_(runs["predictive_with_high_and_normal_tier_windows"]),
                    "high_on_slurm": judge_(runs["predictive_with_high_tier_windows_on_slurm"]),
                    "high_normal_on_slurm": judge_(runs["predictive_with_high_and_normal_tier_windows_on_slurm"]),
                    "high_on_slurm_at_lead": judge_(runs["predictive_with_high_tier_windows_on_slurm_at_lead"]),
                    "high_normal_on_slurm_at_lead":
                        judge_(runs["predictive_with_high_and_normal_tier_windows_on_slurm_at_lead"])}})
    provenance.finished(out)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / ("windows_synthetic.json" if a.seed == SEED else f"windows_synthetic_seed{a.seed}.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}: {out['verdict']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
