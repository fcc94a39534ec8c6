"""Replay on a mixed fleet (issue 24): the same trace, the same simulated cluster (nodes of several GPU types,
jobs that run only on the types they accept), planned by the engine type-aware or type-blind.

- type-aware: the engine sees each node's type and each job's accepted types; holds are per type
  (``Plan.holds_by_type``), preemption frees only GPUs of a type the protected job accepts, and the forecast is
  per (tenant, accepted types) series (``tenant@spec``);
- type-blind: today's engine, which sees only GPU counts (the snapshot without types, plain tenant series); its
  holds land on whatever nodes the actuators' rule picks. The simulator still enforces types: same physics.

Measured per run: utilization, unmet demand per tier and per accepted-type set, GPUs in use per type, and the
GPU-minutes of holds that sat on a type the holder's work could not use (a hold that protected nothing).
Both modes are swept over the policy's headroom, so they can be compared at equal utilization.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import Plan, PolicyMemory, plan
from daemon.policy.fleet import series_name
from daemon.policy.state import PRIORITY
from daemon.sim.actuator import SimulatorActuator, replays_slurm, windows_at_lead_s
from daemon.sim.cluster import NOT_ACCEPTED, SimCluster
from daemon.sim.replay import TIERS, per_step_config
from daemon.sim.workloads import Workload, generate
from forecaster import traces
from forecaster.types import Forecast

MODES = ("aware", "blind")


@dataclass
class FleetWorkload:
    w: Workload                          # demand per tenant, tiers, job sizes, measured start
    node_types: list[str]
    node_gpus: np.ndarray
    accepts: list[tuple[str, ...]]       # per tenant, in order of preference; () = any type
    # per demand column its tenant, where a tenant's jobs ask several types (one column per (tenant, types));
    # None: each column is a tenant (Workload.owners)
    owners: list[str] | None = None

    def spec(self, i: int) -> str:
        return "|".join(self.accepts[i]) or "any"

    def workload(self) -> Workload:
        """The replay's Workload (daemon/sim/strategy.py run_strategy) on this fleet: each column's accepted types,
        and with ``owners`` each column's tenant, so that the strategies (reactive, predictive with the skill gate,
        perfect) replay it with the forecast per (tenant, types) series."""
        owners = None if self.owners is None else list(self.owners)
        return dataclasses.replace(self.w, node_types=list(self.node_types), node_gpus=self.node_gpus,
                                   accepts=list(self.accepts), owners=owners)


def synthetic_fleet(tenants: int = 30, days: float = 1.0, history_days: float = 0.5, seed: int = 7,
                    target_load: float = 0.9) -> FleetWorkload:
    """Three types (h100: 12 nodes x 8, a100: 16 x 8, t4: 16 x 4 = 288 GPUs) and tenants with different
    preferences: high-tier tenants take h100 only or h100 then a100; normal ones a100 then t4, t4 only or any;
    low ones any. Job sizes are cut to the largest node of a type the tenant accepts."""
    pools = [("h100", 12, 8), ("a100", 16, 8), ("t4", 16, 4)]
    node_types = [t for t, k, _ in pools for _ in range(k)]
    node_gpus = np.array([g for _, k, g in pools for _ in range(k)], dtype=np.int64)
    cap = int(node_gpus.sum())
    per_day = 1440
    hist, steps = int(history_days * per_day), int(days * per_day)
    g = generate(tenants, hist + steps + 61, cap, seed=seed, target_load=target_load)
    choices = {"high": [("h100",), ("h100", "a100")], "normal": [("a100", "t4"), ("t4",), (), ("a100",)],
               "low": [()]}
    accepts = [choices[t][i % len(choices[t])] for i, t in enumerate(g.tiers)]
    biggest = {t: max(gg for tt, _, gg in pools if tt == t) for t, _, _ in pools}
    job = np.array([min(int(j), max(biggest[t] for t in (a or biggest))) for j, a in zip(g.job_gpus, accepts)])
    w = Workload(f"fleet-synthetic-{tenants}x{cap}", g.demand, g.tiers, job, cap, hist)
    return FleetWorkload(w, node_types, node_gpus, accepts)


def alibaba_fleet(data_dir: Path, days: float = 2.0, history_days: float = 0.5,
                  capacity_quantile: float = 0.9, whole_fleet: bool = True, per_job_types: bool = False
                  ) -> FleetWorkload:
    """Alibaba GPU 2023 with its GPU-type constraints (``openb_pod_list_gpuspec33.csv``) on the node list's fleet
    mix (``openb_node_list_gpu_node.csv``). A tenant is a (QoS class, gpu_spec) pair: its demand is the GPUs its
    pods hold (a GPU-sharing pod occupies one GPU), its tier the QoS class's, it accepts the spec's models in the
    spec's order (no spec: any). The node list (6,212 GPUs) dwarfs the trace's concurrent demand, so the two are
    brought together at ``capacity_quantile`` of total demand: with ``whole_fleet`` every node of the list is
    kept and every tenant's demand is scaled up by one factor (the mix and the trace's shape both kept); without
    it each (model, GPUs per node) group of nodes is scaled down to the demand (at least one node per model: a
    coarse fleet of a dozen nodes).

    ``per_job_types``: a tenant is the QoS class, and its pods keep their own spec (the trace's per-pod GPU-type
    constraint): one demand column per (QoS class, spec) as before, each now the class's (``owners``), so a class
    whose pods asked T4 and G2 asks both, in one tenant's holds, preemptions and forecast series (``LS@t4``,
    ``LS@g2``, ``LS@*``). The demand, the fleet and the scaling are the same as without it."""
    base = Path(data_dir) / "alibaba-gpu-2023"
    pods = pd.read_csv(base / "openb_pod_list_gpuspec33.csv")
    pods = pods[pods["num_gpu"] > 0].copy()
    pods["gpus"] = pods["num_gpu"].astype(float)
    pods["spec"] = pods["gpu_spec"].fillna("").map(
        lambda s: "|".join(dict.fromkeys(p.strip().lower() for p in str(s).split("|") if p.strip())))
    pods["tenant"] = pods["qos"] + "/" + pods["spec"].replace("", "any")
    frame = traces.gpus_alive(pods, "tenant", step_s=60)
    frame = frame[frame.index >= frame.index[-1] - pd.Timedelta(days=days + history_days)]
    frame = frame.loc[:, frame.sum() > 0]
    names = list(frame.columns)
    hist = int(history_days * 1440)
    cap = int(np.ceil(np.quantile(frame.iloc[hist:].sum(axis=1), capacity_quantile)))
    nodes = pd.read_csv(base / "openb_node_list_gpu_node.csv")
    groups = nodes.groupby([nodes["model"].str.lower(), "gpu"]).size()
    f = cap / float((groups.index.get_level_values(1) * groups).sum())
    if whole_fleet:   # every node kept; demand scaled up to meet it (whole GPUs: a pod holds whole GPUs here)
        frame = np.ceil(frame / f)
        f = 1.0
    node_types: list[str] = []
    node_gpus: list[int] = []
    for (model, g), k in groups.items():
        kk = int(round(k * f))
        node_types += [model] * kk
        node_gpus += [int(g)] * kk
    for model in groups.index.get_level_values(0).unique():   # every model keeps at least one node
        if model not in node_types:
            g = int(groups[model].idxmax())
            node_types.append(model)
            node_gpus.append(g)
    tiers = tuple(traces.QOS_TIER.get(n.split("/")[0], "normal") for n in names)
    accepts = [tuple() if n.split("/", 1)[1] == "any" else tuple(n.split("/", 1)[1].split("|")) for n in names]
    w = Workload("fleet-alibaba-gpuspec33" + ("-per-job-types" if per_job_types else ""), frame, tiers,
                 np.ones(len(names), dtype=np.int64), int(sum(node_gpus)), hist)
    owners = [n.split("/", 1)[0] for n in names] if per_job_types else None
    return FleetWorkload(w, node_types, np.array(node_gpus, dtype=np.int64), accepts, owners)


def guarantee_from_history(fw: FleetWorkload) -> dict[str, float]:
    """``fleet.reserve_share`` per type as an operator would size it from the history (the steps before the
    measured window): the peak of the high tier's demand whose first choice is the type, as a share of the type's
    GPUs (at most 1). Work that accepts any type counts nowhere (it can go anywhere); a type no high-tier work asks
    for first gets no guarantee."""
    w = fw.w
    hist = w.demand.iloc[: w.start].to_numpy(dtype=float)
    cap: dict[str, int] = {}
    for t, g in zip(fw.node_types, fw.node_gpus.tolist()):
        cap[t] = cap.get(t, 0) + int(g)
    peak = {t: np.zeros(hist.shape[0]) for t in cap}
    for j, (tier, acc) in enumerate(zip(w.tiers, fw.accepts)):
        if tier == "high" and acc and acc[0] in peak:
            peak[acc[0]] += np.nan_to_num(hist[:, j])
    return {t: round(min(1.0, float(v.max(initial=0.0)) / cap[t]), 3) for t, v in sorted(peak.items())}


def _perfect(demand: np.ndarray, k: int, H: int, names: tuple[str, ...], at, step_s: int) -> Forecast:
    fut = demand[k + 1: k + 1 + H].T
    if fut.shape[1] == 0:
        fut = demand[k: k + 1].T
    if fut.shape[1] < H:
        fut = np.concatenate([fut, np.repeat(fut[:, -1:], H - fut.shape[1], axis=1)], axis=1)
    return Forecast(names, (0.5, 0.9, 0.99), np.repeat(fut[:, :, None], 3, axis=2), at, step_s, "perfect")


def run_fleet(fw: FleetWorkload, cfg: Config, mode: str, *, steps: int, knobs: dict | None = None,
              check_invariants: bool = False, label: str | None = None) -> dict:
    """One replay of ``fw`` planned ``mode`` ("aware" or "blind") with a perfect forecast (the true future:
    what differs between the modes is then the engine's use of types, not forecast error). ``label`` names the
    run's variant in the report (``mode`` by default; e.g. a type-aware run with a per-type guarantee)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: choose from {MODES}")
    if fw.owners is not None:
        raise ValueError("run_fleet replays one set of types per tenant; a fleet whose tenants ask several types "
                         "replays with run_strategy (FleetWorkload.workload())")
    w = fw.w
    steps = min(steps, len(w.demand) - w.start - 1)
    demand = w.demand.to_numpy(dtype=float)
    step_s = int((w.demand.index[1] - w.demand.index[0]).total_seconds())
    if knobs:   # before the per-step scaling, as in daemon/sim/strategy.py
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update=knobs)})
    cfg = per_step_config(cfg, step_s)
    tenants = tuple(map(str, w.demand.columns))
    prio = np.array([PRIORITY[t] for t in w.tiers], dtype=np.int8)
    sc = cfg.source.simulator
    c = SimCluster(list(tenants), prio, 0, w.job_gpus, drain_steps=sc.drain_steps,
                   checkpoint_steps=sc.checkpoint_steps, max_wait_steps=cfg.policy.max_wait_steps,
                   node_types=fw.node_types, node_gpus=fw.node_gpus, accepts=fw.accepts)
    act = SimulatorActuator(c, tenants, windows_ahead=replays_slurm(cfg.actuators.enabled),
                            at_lead_s=windows_at_lead_s(cfg), min_lead_s=cfg.window_min_lead_s())
    series = tuple(series_name(t, a) for t, a in zip(tenants, fw.accepts)) if mode == "aware" else tenants
    tier_of = np.array(w.tiers)
    specs = [fw.spec(i) for i in range(len(tenants))]
    spec_names = sorted(set(specs))
    spec_of = np.array([spec_names.index(s) for s in specs])
    T = len(c.type_names)
    m = step_s / 60.0
    util, wanted_t, unmet_t = [], np.zeros(3), np.zeros(3)
    unmet_spec, wanted_spec = np.zeros(len(spec_names)), np.zeros(len(spec_names))
    unmet_ten = np.zeros(len(tenants))
    in_use_type, useless, held_high, plan_s = np.zeros(T), 0.0, 0.0, []
    preempted, preempted_unusable = 0, 0
    mem, last = PolicyMemory(), None
    warm = min(240, w.start)
    t0 = time.perf_counter()
    for k in range(w.start - warm, w.start + steps):
        st = c.step(demand[k])
        if check_invariants:
            c.check_invariants()
        measured = k >= w.start
        if measured:
            util.append(st.running_gpus / max(st.capacity, 1))
            un = np.maximum(st.wanted - st.served, 0)
            for i, t in enumerate(TIERS):
                sel = tier_of == t
                wanted_t[i] += float(st.wanted[sel].sum())
                unmet_t[i] += float(un[sel].sum())
            np.add.at(unmet_spec, spec_of, un)
            unmet_ten += un
            np.add.at(wanted_spec, spec_of, st.wanted)
            in_use_type += c.running_per_type().sum(axis=0)
            useless += float(c.useless_held().sum())
            held_high += float(c.held_gpus()[np.r_[tier_of == "high", True]].sum())
        state = c.state(tenants, w.tiers, w.demand.index[k], step_s)
        if mode == "blind":
            state = dataclasses.replace(state, nodes=dataclasses.replace(state.nodes, gpu_type=None),
                                        jobs=dataclasses.replace(state.jobs, accepts=None))
        fc = _perfect(demand, k, cfg.cycle.horizon_steps, series, state.at, step_s)
        a = time.perf_counter()
        p: Plan = plan(fc, state, mem, cfg, last)
        if measured:
            plan_s.append(time.perf_counter() - a)
            for x in p.preemptions:
                preempted += 1
                i = tenants.index(x.for_tenant) if x.for_tenant in tenants else -1
                if i >= 0 and c.acc_rank[i, c.node_type[int(x.node)]] >= NOT_ACCEPTED:
                    preempted_unusable += int(x.gpus)
        act.apply(p)
        mem, last = p.memory, p
    n = max(len(util), 1)
    return {
        "mode": label or mode, "plan": mode, "knobs": dict(knobs or {}), "steps": len(util),
        "reserve_share_by_type": dict(cfg.fleet.reserve_share),
        "utilization": float(np.mean(util)) if util else float("nan"),
        "tiers": {t: {"demand_gpu_min": float(wanted_t[i] * m), "unmet_gpu_min": float(unmet_t[i] * m),
                      "unmet_share": float(unmet_t[i] / wanted_t[i]) if wanted_t[i] else 0.0}
                  for i, t in enumerate(TIERS)},
        "by_spec": {s: {"demand_gpu_min": float(wanted_spec[j] * m), "unmet_gpu_min": float(unmet_spec[j] * m)}
                    for j, s in enumerate(spec_names)},
        "types": {t: {"capacity": int(c.type_capacity()[j]), "in_use_mean": float(in_use_type[j] / n)}
                  for j, t in enumerate(c.type_names)},
        "unmet_by_tenant": {t: float(unmet_ten[i] * m) for i, t in enumerate(tenants) if unmet_ten[i] > 0},
        "held_unusable_gpu_min": useless * m,
        "high_held_gpus_mean": held_high / n,
        "preemptions": preempted,
        "preempted_gpus_unusable_by_beneficiary": preempted_unusable,
        "plan_ms_p50": float(np.percentile(plan_s, 50) * 1000) if plan_s else 0.0,
        "wall_s": time.perf_counter() - t0,
    }


def at_equal_utilization(runs: list[dict], tier: str = "high") -> dict:
    """Each variant's unmet share of ``tier`` at the same utilization: linear interpolation along each variant's
    runs (sorted by utilization) at the middle of the utilizations all variants reach; {"overlap": None} where
    they do not overlap."""
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    by = {mo: sorted((r["utilization"], r["tiers"][tier]["unmet_share"]) for r in runs if r["mode"] == mo)
          for mo in modes}
    if not all(by.values()):
        return {}
    lo = max(v[0][0] for v in by.values())
    hi = min(v[-1][0] for v in by.values())
    if lo > hi:
        return {"overlap": None}
    u = (lo + hi) / 2
    return {"utilization": u, **{mo: float(np.interp(u, [x for x, _ in v], [y for _, y in v]))
                                 for mo, v in by.items()}}
