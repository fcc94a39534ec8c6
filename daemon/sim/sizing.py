"""The GPUs each strategy needs for the same SLO (issue 40, item 3): the smallest cluster, in whole nodes, on which
one strategy at one knob setting meets one service-level objective over the replayed window.

Why: at a fixed cluster size the strategies trade tiers against each other and utilization; what an operator buys
is GPUs. Holding the SLO fixed and shrinking the cluster until it is just met turns every strategy's figures into
one number, its GPUs, and so into the saving a forecast brings.

The SLO (``SLO``): the high tier has at most ``high`` of its GPU demand unmet, the normal tier at most ``normal``;
where the replay measures inference requests (``Meter.inf_requests`` / ``inf_throttled`` per tier, read with
getattr and ignored when absent) the high tier also has at most ``high_requests`` of its requests throttled.

The search (``min_size``) brackets, then bisects: from the workload's own size it steps down while the SLO is met
(to one node at least) or up until it is met (up to ``max_nodes``), each step twice the last, then bisects between
the largest size known to miss and the smallest known to meet, each size one replay, at most ``max_replays`` in
all. Bisection assumes the SLO is monotone in the size; it need not be (a larger cluster can change which nodes a
hold takes and whom a preemption hits), so the result says whether the found size less one node was replayed and
missed; one node more is replayed too, and any size tried that met the SLO below a larger one that missed it is
named. When the largest size tried
still misses, the result is "not met" and says that size; unless that size is a floor (``Sizing.floor``): there no
GPU the high and normal tiers needed went unmet, so what misses is the inference services' throttled share, their
replicas' cold-start lag, which no larger cluster removes; that setting "never meets" the SLO. ``min_size(top_first=
True)`` replays the top of the bracket first, so a setting with a floor costs one replay.

The knobs each strategy is sized at (``sweep``): as fairly as the forecast's own, every strategy is sized at every
setting of its services' knobs (the HPA headroom over the rate, ``with_service_headroom``, and the HPA's scale-down
stabilization window, ``with_service_stabilization``, for every strategy alike; predictive also the forecast
quantile its replica autoscaler scales to, ``replica_quantile``), and its answer is the fewest GPUs over the
settings that meet the SLO, naming the setting.

The forecast bank (the forecasts of demand, which do not depend on the cluster) is made once and reused across
sizes. Static keeps its pool share (``policy.reserve_share``) of whatever size is replayed.

Scaling a mixed fleet ([fleet] pools, a typed workload): the search is over the fleet's total node count, and every
pool keeps its share of the nodes: nodes are handed out one at a time to the pool whose share is furthest ahead of
what it holds (the D'Hondt rule, so no pool shrinks when the fleet grows), each pool at least one node.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from daemon.config import Config
from daemon.sim.inference import need_frame
from daemon.sim.replay import STRATEGIES, ForecastBank, Meter, _bank, run_strategy
from daemon.sim.workloads import Workload
from daemon.text import plural
from forecaster.baselines import Forecaster

SERVICE_HEADROOM = "service_headroom"   # a setting's key: the services' HPA headroom (the workload, not the policy)
SERVICE_STABILIZATION = "service_stabilization_s"   # and their HPA's scale-down stabilization window, seconds
SERVICE_KEYS = (SERVICE_HEADROOM, SERVICE_STABILIZATION)   # the settings' keys that change the workload
MAX_REPLAYS = 24   # replays per strategy: the bracket (at most log2 of the size range) and the bisection


@dataclass(frozen=True)
class SLO:
    """Shares of each tier's demand allowed unmet (and of the high tier's requests allowed throttled)."""

    high: float = 0.001
    normal: float = 0.02
    high_requests: float = 0.001


def slo_error(name: str, value: float) -> str | None:
    """Why an SLO share is invalid (None when it is valid): a share in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value < 1:
        return f"{name} is the share of demand allowed unmet, in [0, 1) (0.001 = 0.1%), not {value!r}"
    return None


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def slo_figures(m: Meter) -> dict:
    """The SLO's figures from one replay: each tier's unmet share of its demand (high, normal) and, where the replay
    measured inference requests, the high tier's throttled share (None where it did not)."""
    hi, no = m.tier("high"), m.tier("normal")
    req, thr = getattr(m, "inf_requests", None), getattr(m, "inf_throttled", None)
    inf = None
    if req is not None and thr is not None and req.get("high", 0) > 0:
        inf = _share(float(thr.get("high", 0.0)), float(req["high"]))
    return {"high_unmet_share": _share(hi["unmet_gpu_min"], hi["demand_gpu_min"]),
            "normal_unmet_share": _share(no["unmet_gpu_min"], no["demand_gpu_min"]),
            "high_throttled_share": inf}


def meets(fig: dict, slo: SLO) -> bool:
    """Whether the figures meet the SLO (the requests' part only where they were measured)."""
    return fig["high_unmet_share"] <= slo.high and fig["normal_unmet_share"] <= slo.normal and \
        (fig["high_throttled_share"] is None or fig["high_throttled_share"] <= slo.high_requests)


def node_count(w: Workload) -> int:
    """The workload's own size in whole nodes."""
    if w.node_gpus is not None:
        return len(w.node_gpus)
    return max(1, math.ceil(w.capacity / w.gpus_per_node))


def pool_nodes(counts: dict[str, int], total: int) -> dict[str, int]:
    """A fleet's pools (type -> nodes) scaled to `total` nodes, each keeping its share: one node each, then one at a
    time to the pool with the largest share / (nodes + 1) (D'Hondt: a pool never loses a node as `total` grows)."""
    if total < len(counts):
        raise ValueError(f"{total} nodes cannot hold one of each of the fleet's {len(counts)} pools")
    out = {t: 1 for t in counts}
    for _ in range(total - len(counts)):
        t = max(counts, key=lambda x: (counts[x] / (out[x] + 1), x))
        out[t] += 1
    return out


def resize(w: Workload, nodes: int) -> Workload:
    """`w` on a cluster of `nodes` whole nodes (demand, tiers, jobs unchanged). Untyped: nodes x gpus_per_node GPUs;
    a mixed fleet: every pool scaled by the same factor (``pool_nodes``), each node keeping its type's GPUs."""
    if w.node_types is None or w.node_gpus is None:
        return dataclasses.replace(w, capacity=nodes * w.gpus_per_node)
    types = list(dict.fromkeys(w.node_types))
    gpus = {t: int(g) for t, g in zip(w.node_types, w.node_gpus)}
    counts = {t: sum(x == t for x in w.node_types) for t in types}
    new = pool_nodes(counts, nodes)
    node_types = [t for t in types for _ in range(new[t])]
    node_gpus = np.array([gpus[t] for t in node_types], dtype=np.int64)
    return dataclasses.replace(w, capacity=int(node_gpus.sum()), node_types=node_types, node_gpus=node_gpus)


def fleet_pools(w: Workload) -> dict[str, dict[str, int]] | None:
    """A typed workload's pools as type -> {nodes, gpus_per_node} (None on a one-model cluster)."""
    if w.node_types is None or w.node_gpus is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for t, g in zip(w.node_types, w.node_gpus):
        p = out.setdefault(t, {"nodes": 0, "gpus_per_node": int(g)})
        p["nodes"] += 1
    return out


@dataclass
class Try:
    nodes: int
    gpus: int
    met: bool
    figures: dict
    meter: Meter = field(repr=False)
    # a mixed fleet: each type's nodes and GPUs per node at this size (None: one model). "224 GPUs (28 nodes)"
    # alone did not say how many of which GPU the fleet needs
    pools: dict[str, dict[str, int]] | None = None


@dataclass
class Sizing:
    """One strategy's search: every size tried and the smallest found to meet the SLO (None: none tried did)."""

    strategy: str
    knobs: dict
    slo: SLO
    tries: list[Try]
    found: Try | None
    largest_tried: int
    below_missed: bool | None  # the found size less one node replayed and missed (None: not replayed, 1 node)
    beaten: int | None = None  # another setting met at this many nodes and this one missed one node fewer

    def floor(self) -> Try | None:
        """The largest size tried, when it misses only on the services' throttled requests with no GPU of the high
        and normal tiers unmet: a floor, the replicas' cold-start lag, that no larger cluster lowers (None: the SLO
        was met, or a larger cluster could still help)."""
        if self.found is not None or not self.tries or self.beaten is not None:
            return None
        top = self.tried_nodes(self.largest_tried)
        f = top.figures
        if f["high_unmet_share"] == 0 and f["normal_unmet_share"] == 0 and f["high_throttled_share"] is not None \
                and f["high_throttled_share"] > self.slo.high_requests:
            return top
        return None

    def tried_nodes(self, nodes: int) -> Try | None:
        """The replay at `nodes` nodes, if that size was tried."""
        return next((t for t in self.tries if t.nodes == nodes), None)

    def summary(self) -> dict:
        out = {"strategy": self.strategy, "knobs": dict(self.knobs), "met": self.found is not None,
               "replays": len(self.tries), "largest_nodes_tried": self.largest_tried,
               "one_node_less_misses": self.below_missed,
               "tries": [{"nodes": t.nodes, "gpus": t.gpus, "met": t.met, **t.figures} for t in self.tries]}
        if self.found is None and self.beaten is not None:
            out.update(never_meets=False, not_fewer_than=self.beaten,
                       note=f"no fewer than {self.beaten} nodes: another setting met there and this one misses at "
                            f"{self.beaten - 1}")
            return out
        if self.found is None:
            top = self.floor()
            out["never_meets"] = top is not None
            out["note"] = f"not met: the largest size tried, {self.largest_tried} nodes, still misses the SLO" \
                if top is None else (
                    f"never meets: at {top.nodes} nodes no GPU the high and normal tiers needed went unmet, yet "
                    f"{top.figures['high_throttled_share']:.3%} of the high tier's requests were throttled (the SLO "
                    f"allows {self.slo.high_requests:.3%}): the replicas' cold-start lag, which no larger cluster "
                    "removes")
            return out
        m = self.found.meter
        s = m.summary()
        steps = len(m.util)
        gpu_steps = self.found.gpus * steps
        served = sum(float(np.sum(m.served[t])) for t in m.served)
        if self.found.pools is not None:
            out["pools"] = self.found.pools
        out.update(nodes=self.found.nodes, gpus=self.found.gpus, gpu_hours=gpu_steps * m.step_min / 60.0,
                   allocated_utilization=s["utilization"], busy_utilization=_share(served, gpu_steps),
                   preemptions=s["preemptions"], **self.found.figures,
                   tiers={t: {k: s["tiers"][t][k] for k in ("demand_gpu_min", "unmet_gpu_min")} for t in s["tiers"]})
        if "skill_gate" in s:   # predictive is sized with the gate on: how much of it acted on the forecast
            out["skill_gate"] = s["skill_gate"]
        notes = []
        if self.below_missed is False:
            notes.append(f"not the smallest: {self.found.nodes - 1} nodes also meet the SLO (the replays ran out "
                         "before the bisection closed)")
        pair = self.not_monotone()
        if pair is not None:
            notes.append(f"the SLO is not monotone in the size here: {pair[0]} nodes meet it, {pair[1]} miss it "
                         "(bisection assumes a larger cluster never does worse)")
        out["monotone_in_tries"] = pair is None
        if notes:
            out["note"] = "; ".join(notes)
        return out

    def not_monotone(self) -> tuple[int, int] | None:
        """A size that met the SLO and a larger one that missed it, among the sizes tried (None: none such)."""
        met = sorted(t.nodes for t in self.tries if t.met)
        missed = sorted((t.nodes for t in self.tries if not t.met), reverse=True)
        return next(((a, b) for a in met for b in missed if b > a), None)


def min_size(w: Workload, cfg: Config, strategy: str, *, steps: int, bank: ForecastBank | None = None,
             knobs: dict | None = None, slo: SLO = SLO(), start_nodes: int | None = None,
             max_nodes: int | None = None, max_replays: int = MAX_REPLAYS, first: int | None = None,
             top_first: bool = False, beat: int | None = None,
             progress: Callable[[str], None] | None = None) -> Sizing:
    """The smallest cluster in whole nodes on which `strategy` (at `knobs`) meets `slo` over `steps` measured steps
    of `w`: a bracket from `start_nodes` (default: the workload's own size) in steps of `first` nodes (default:
    half of it) that double until the SLO changes side, then bisection; no size above `max_nodes` (default: 8x the
    workload's own) and at most `max_replays` replays, and then the sizes one node below and above the found one
    (the checks of the bisection's assumption). ``top_first``: replay `max_nodes` first and stop there if it misses
    (a setting that misses at the top costs one replay, not a bracket). ``beat``: a size another setting met, so
    only a smaller answer matters: `beat` - 1 is replayed first and a miss there ends the search (a smaller cluster
    is taken to do no better, as the bisection takes it); a meet there is the top of the search below it."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {STRATEGIES}")
    own = node_count(w)
    floor = len(set(w.node_types)) if w.node_types is not None else 1
    top = max(max_nodes if max_nodes is not None else 8 * own, floor)
    n0 = min(max(start_nodes if start_nodes is not None else own, floor), top)
    tried: dict[int, Try] = {}
    order: list[Try] = []

    def replay(nodes: int) -> Try:
        if nodes not in tried:
            r = resize(w, nodes)
            m = run_strategy(strategy, r, cfg, bank, steps=steps, knobs=knobs)
            fig = slo_figures(m)
            tried[nodes] = Try(nodes, r.capacity, meets(fig, slo), fig, m, pools=fleet_pools(r))
            order.append(tried[nodes])
            if progress is not None:
                t = tried[nodes]
                progress(f"{strategy}: {nodes} nodes ({t.gpus} GPUs): {'meets' if t.met else 'misses'} the SLO "
                         f"(high {fig['high_unmet_share']:.3%}, normal {fig['normal_unmet_share']:.3%} unmet"
                         + ("" if fig["high_throttled_share"] is None else
                            f"; high requests {fig['high_throttled_share']:.3%} throttled") + ")")
        return tried[nodes]

    if beat is not None and beat - 1 >= floor:
        if not replay(beat - 1).met:
            return Sizing(strategy, dict(knobs or {}), slo, order, None, beat - 1, None, beaten=beat)
        top, n0 = beat - 1, min(n0, beat - 1)
    elif top_first and not replay(top).met:
        return Sizing(strategy, dict(knobs or {}), slo, order, None, top, None)

    # the bracket: an exponential search from n0 (steps of `first`, doubling), down while the SLO is met, up while
    # it is missed; lo is the largest size known to miss (floor - 1: below every size), hi the smallest to meet
    lo, hi = floor - 1, None
    d = max(1, first if first is not None else n0 // 2)
    if replay(n0).met:
        hi = n0
        while hi > floor and len(order) < max_replays:
            n = max(floor, hi - d)
            if not replay(n).met:
                lo = n
                break
            hi, d = n, d * 2
    else:
        lo = n0
        while lo < top and len(order) < max_replays:
            n = min(top, lo + d)
            if replay(n).met:
                hi = n
                break
            lo, d = n, d * 2
    while hi is not None and hi - lo > 1 and len(order) < max_replays:
        mid = (lo + hi) // 2
        if replay(mid).met:
            hi = mid
        else:
            lo = mid
    found = tried[hi] if hi is not None else None
    below = None
    if found is not None and found.nodes > floor:
        if found.nodes - 1 not in tried:   # the bisection ran out of replays: the check is one more
            replay(found.nodes - 1)
        below = not tried[found.nodes - 1].met
    if found is not None and found.nodes < top and found.nodes + 1 not in tried:
        replay(found.nodes + 1)   # a larger size that misses shows the SLO is not monotone here (not_monotone)
    return Sizing(strategy, dict(knobs or {}), slo, order, found, max(tried), below)


SIZING_KNOBS = {"static": {"reserve_share": 0.2}, "reactive": {}, "predictive": {}, "perfect": {}}


def gated(cfg: Config) -> Config:
    """`cfg` with the skill gate on (policy.skill_gate.enabled): predictive acts on the forecast only per tenant
    where it has shown skill, as issue 40 sizes it."""
    gate = cfg.policy.skill_gate.model_copy(update={"enabled": True})
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"skill_gate": gate})})


def size_all(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int, strategies=STRATEGIES,
             slo: SLO = SLO(), forecast_every: int = 1, max_nodes: int | None = None,
             max_replays: int = MAX_REPLAYS, progress: Callable[[str], None] | None = None) -> dict[str, Sizing]:
    """Each strategy's smallest cluster for `slo` (static at a 20% pool, reactive and perfect at the configured
    policy, predictive with the skill gate on). One forecast bank for every predictive replay; the sizes found
    for earlier strategies start the later searches (fewer replays: the sizes are near each other)."""
    out: dict[str, Sizing] = {}
    bank = None
    start = None
    try:
        for s in strategies:
            if s == "predictive":
                if model is None:
                    continue
                bank = _bank(model, w, cfg, [("predictive", {}), ("predictive", {})], forecast_every, steps)
            out[s] = min_size(w, gated(cfg) if s == "predictive" else cfg, s, steps=steps,
                              bank=bank if s == "predictive" else None, knobs=SIZING_KNOBS[s], slo=slo,
                              start_nodes=start, first=None if start is None else max(1, start // 16),
                              max_nodes=max_nodes, max_replays=max_replays, progress=progress)
            if out[s].found is not None:
                start = out[s].found.nodes
    finally:
        if bank is not None:
            bank.close()
    return out


SERVICE_HEADROOMS = (0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0)  # the services' HPA headrooms sized at: the usual ones,
# then up to where ServeGen's reactive replicas, 5 min late, throttle under 0.1% with the HPA's default 300 s window
# (7: on the 6-hour window static and reactive miss at 5 and meet at 10, so the step between is sized too).
# Before the window was modelled the sweep went to 40x, where scaling down at once still missed; 1.5 and 20-40
# never won a strategy's answer and are dropped to afford the window's second value.
SERVICE_STABILIZATIONS = (300.0, 900.0)  # the HPA's scale-down windows: its default, and 15 min (ServeGen's bursts
# come back within a 10-minute window; kept longer, the replicas a burst brought up serve the next one)
REPLICA_QUANTILES = (0.5, 0.9)                  # and predictive's replica autoscaler's forecast quantiles


def with_service_headroom(w: Workload, h: float) -> Workload:
    """The workload with its services' HPA headroom at ``h``: their demand (the GPU need the autoscalers, the
    forecast and the policy see) recomputed from their rates, all else the same."""
    specs = {c: dataclasses.replace(s, headroom=h) for c, s in w.inference.items()}
    d = w.demand.copy()
    need = need_frame(w.rates, specs)
    for c in specs:
        d[c] = need[c]
    return dataclasses.replace(w, demand=d, inference=specs)


def with_service_stabilization(w: Workload, seconds: float) -> Workload:
    """The workload with its services' HPA scale-down stabilization at ``seconds``: only what their autoscalers
    ask for changes (daemon/sim/inference.py), not their demand, so a forecast bank made for it stays valid."""
    specs = {c: dataclasses.replace(s, scale_down_stabilization_s=seconds) for c, s in w.inference.items()}
    return dataclasses.replace(w, inference=specs)


def service_settings(strategies=STRATEGIES, headrooms=SERVICE_HEADROOMS, quantiles=REPLICA_QUANTILES,
                     stabilizations=SERVICE_STABILIZATIONS) -> dict[str, list[dict]]:
    """Each strategy's settings of its services' knobs: every headroom at every scale-down window (None: the
    workload's own), and for predictive each of those at each replica quantile (the knobs the forecast brings are
    tuned as the baselines' are, and the HPA's for every strategy alike)."""
    return {s: [{SERVICE_HEADROOM: h, **({SERVICE_STABILIZATION: b} if b is not None else {}),
                 **({"replica_quantile": q} if q is not None else {})}
                for h in headrooms for b in stabilizations for q in (quantiles if s == "predictive" else (None,))]
            for s in strategies}


def roomy_nodes(w: Workload, steps: int) -> int:
    """Whole nodes holding every tenant's peak demand (to the end of the replay) at once: on a cluster this large
    no tenant's need waits on another's, so a miss there is not the cluster's size."""
    peaks = w.demand.iloc[: w.start + steps].max().fillna(0.0)
    return max(1, math.ceil(float(peaks.sum()) / w.gpus_per_node))


@dataclass
class Swept:
    """One strategy sized at each of its settings: its answer is the setting with the fewest GPUs that meets the
    SLO (the first listed on a tie)."""

    strategy: str
    settings: list[tuple[dict, Sizing]]

    def best(self) -> tuple[dict, Sizing] | None:
        met = [(i, st, z) for i, (st, z) in enumerate(self.settings) if z.found is not None]
        if not met:
            return None
        _, st, z = min(met, key=lambda x: (x[2].found.gpus, x[0]))
        return st, z

    def chosen(self) -> tuple[dict, Sizing]:
        """The best setting, or (none meets) the first, whose search is what the strategy reports."""
        return self.best() or self.settings[0]

    def summary(self) -> dict:
        st, z = self.chosen()
        rows = []
        for s, y in self.settings:
            d = y.summary()
            rows.append({"setting": s, "met": d["met"], "never_meets": d.get("never_meets", False),
                         "not_fewer_than": d.get("not_fewer_than"),
                         "gpus": d.get("gpus"), "nodes": d.get("nodes"), "replays": d["replays"],
                         "largest_nodes_tried": d["largest_nodes_tried"], "note": d.get("note"),
                         # the high tier's throttled share at the largest size tried: a floor's height
                         "top_high_throttled_share": y.tried_nodes(y.largest_tried).figures["high_throttled_share"]})
        return {**z.summary(), "setting": st, "setting_met": self.best() is not None, "settings": rows}


def sweep(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int,
          settings: dict[str, list[dict]] | None = None, slo: SLO = SLO(), forecast_every: int = 1,
          max_nodes: int | None = None, max_replays: int = MAX_REPLAYS,
          progress: Callable[[str], None] | None = None) -> dict[str, Swept]:
    """Each strategy's smallest cluster for `slo` at each of its `settings` (default ``service_settings()``): a
    setting's ``service_headroom`` re-derives the services' demand, its other keys are policy knobs (over
    ``SIZING_KNOBS``; predictive with the skill gate on), its ``service_stabilization_s`` the services' scale-down
    window. Each setting's top size (`max_nodes`, default the larger
    of twice the workload's own and ``roomy_nodes``) is replayed first, so a setting that never meets costs one
    replay; and once a strategy met the SLO at some setting, each later setting first replays one node fewer and
    stops there if it misses (it cannot do better), so a setting that cannot beat the best so far costs one replay.
    A search starts from the strategy's best size so far, else the size found last (the sizes are near each
    other). One forecast bank per headroom serves every predictive setting and size there (at every window: the
    window changes no demand)."""
    settings = settings if settings is not None else service_settings()
    heads = list(dict.fromkeys(st.get(SERVICE_HEADROOM) for sts in settings.values() for st in sts))
    out: dict[str, list[tuple[dict, Sizing]]] = {s: [] for s in settings if s != "predictive" or model is not None}
    hint: dict[str, int] = {}
    last: int | None = None
    for h in heads:
        wh = w if h is None else with_service_headroom(w, h)
        top = max_nodes if max_nodes is not None else max(2 * node_count(w), roomy_nodes(wh, steps))
        bank = None
        try:
            for s in out:
                for st in (x for x in settings[s] if x.get(SERVICE_HEADROOM) == h):
                    if s == "predictive" and bank is None:
                        bank = _bank(model, wh, cfg, [("predictive", {}), ("predictive", {})], forecast_every, steps)
                    knobs = {**SIZING_KNOBS[s], **{k: v for k, v in st.items() if k not in SERVICE_KEYS}}
                    ws = wh if st.get(SERVICE_STABILIZATION) is None \
                        else with_service_stabilization(wh, st[SERVICE_STABILIZATION])
                    say = None if progress is None else (lambda line, st=st: progress(f"{st}: {line}"))
                    start = hint.get(s, last)   # its own best so far, else the size found last
                    z = min_size(ws, gated(cfg) if s == "predictive" else cfg, s, steps=steps,
                                 bank=bank if s == "predictive" else None, knobs=knobs, slo=slo, start_nodes=start,
                                 first=None if start is None else max(1, start // 16), max_nodes=top,
                                 max_replays=max_replays, top_first=True, beat=hint.get(s), progress=say)
                    out[s].append((dict(st), z))
                    if z.found is not None:
                        hint[s] = min(hint.get(s, z.found.nodes), z.found.nodes)
                        last = z.found.nodes
        finally:
            if bank is not None:
                bank.close()
    return {s: Swept(s, r) for s, r in out.items() if r}


def chosen(swept: dict[str, Swept]) -> dict[str, Sizing]:
    """Each strategy's search at its chosen setting (what ``savings`` and ``lines`` read)."""
    return {s: x.chosen()[1] for s, x in swept.items()}


def savings(found: dict[str, Sizing], of: str = "predictive") -> dict[str, float | None]:
    """The share of GPUs `of` saves against each other strategy (None where either missed the SLO)."""
    me = found.get(of)
    out: dict[str, float | None] = {}
    for s, z in found.items():
        if s == of:
            continue
        ok = me is not None and me.found is not None and z.found is not None
        out[s] = 1 - me.found.gpus / z.found.gpus if ok else None
    return out


def lines(found: dict[str, Sizing]) -> list[str]:
    """One line per strategy, then the savings of predictive against static and reactive."""
    out = []
    for s, z in found.items():
        d = z.summary()
        if not d["met"]:
            out.append(f"{s:<10} {d['note']}")
            continue
        fig = f"high {d['high_unmet_share']:.3%} unmet, normal {d['normal_unmet_share']:.3%}"
        if d["high_throttled_share"] is not None:
            fig += f", high requests {d['high_throttled_share']:.3%} throttled"
        mono = f" ({d['note']})" if "note" in d else ""
        pools = "" if "pools" not in d else ": " + ", ".join(
            f"{t} {p['nodes']} x {p['gpus_per_node']}" for t, p in d["pools"].items())
        out.append(f"{s:<10} {d['gpus']:>6} GPUs ({d['nodes']} nodes{pools}), {d['gpu_hours']:,.0f} GPU-h, utilization "
                   f"{d['allocated_utilization']:.1%} allocated / {d['busy_utilization']:.1%} busy; {fig}; "
                   f"{d['replays']} replays{mono}")
        if "skill_gate" in d:
            out.append(f"{'':<10} {_gate(d['skill_gate'])}")
    sv = savings(found) if "predictive" in found else {}
    parts = [_saving(s, v, found) for s, v in sv.items() if s in ("static", "reactive")]
    if parts:
        out.append("predictive " + ", ".join(parts))
    return out


def _gate(g: dict[str, int]) -> str:
    """What the skill gate did at the size found: predictive is sized with it on (``gated``), and where it never
    trusted the forecast every replay was reactive's, line for line, with nothing in the output to say why (a
    synthetic day: "predictive saves 0.0% of reactive's GPUs" under the same figures at every size)."""
    read, on = g["read_tenant_steps"], g["read_tenant_steps_on_forecast"]
    share = f"{on / read:.1%}" if read else "none"
    rest = "" if read and on == read else "; planned as reactive plans for the rest" if on else \
        ": planned as reactive plans, so its sizes are reactive's"
    return (f"(skill gate on, policy.skill_gate: acted on the forecast for {share} of the steps of the "
            f"{plural(g['read_tenants'], 'tenant')} whose verdict the plan reads{rest})")


def _saving(other: str, v: float | None, found: dict[str, Sizing]) -> str:
    """What predictive saves against `other`, or which of the two met the SLO where not both did: "not met" alone
    read as predictive's miss where it met the SLO and the other never did (its best case); one that never
    meets it at any size (``Sizing.floor``) is said so, not "at no size tried"."""
    if v is not None:
        return f"{'saves' if v >= 0 else 'needs'} {abs(v):.1%} {'of' if v >= 0 else 'more than'} {other}'s GPUs"
    me, z = found["predictive"].found, found[other].found
    if me is not None and found[other].floor() is not None:   # no larger cluster would meet it either
        return f"meets the SLO at {me.gpus} GPUs where {other} never meets it (the throttled floor: its " \
               "replicas' cold-start lag, at any size)"
    if me is not None:
        return f"meets the SLO at {me.gpus} GPUs where {other} meets it at no size tried (up to " \
               f"{found[other].largest_tried} nodes)"
    if z is not None:
        return f"meets the SLO at no size tried where {other} meets it at {z.gpus} GPUs"
    return f"no comparison with {other}: neither meets the SLO"


def swept_lines(swept: dict[str, Swept]) -> list[str]:
    """``lines`` at each strategy's chosen setting, then per strategy the setting chosen and those never meeting."""
    out = lines(chosen(swept))
    for s, x in swept.items():
        b = x.best()
        never = [st for st, z in x.settings if z.floor() is not None]
        out.append(f"{s:<10} " + (f"at {b[0]}" if b is not None else "meets the SLO at no setting")
                   + (f"; never meets at {', '.join(map(str, never))} (the throttled floor)" if never else ""))
    return out
