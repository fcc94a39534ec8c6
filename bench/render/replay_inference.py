"""Renderer for docs/replay.md's inference block (bench/inference_bench.py): the services' throttled requests per
strategy and cold start, the gap closed at equal GPU-hours, the batch tiers beside them and the rate ceiling.
Its own module because docs/replay.md's renderers outgrew one file."""

from __future__ import annotations

from bench.render.common import (
    block,
    exists,
    load,
    n,
    pct,
    source,
    table,
    verdict,
)
from bench.render.replay_inference_noise import seeds_noise


@block("replay-inference")
def replay_inference() -> str:
    """ServeGen's services beside batch at each cold start (bench/inference_bench.py): every strategy's requests and
    GPUs, and per predictive replica quantile the gap to perfect closed and the batch tiers' unmet against
    reactive's at equal GPU-hours."""
    d = load("inference_servegen.json")
    tg = d["targets"]
    rows, gaps = [], []

    def qname(q: float | None) -> str:
        return "" if q is None else f" (replicas at p{100 * q:g})"

    def row(c: dict, label: str, r: dict) -> list[str]:
        hi, nr = r["tiers"]["high"], r["tiers"]["normal"]
        svc = sum(t["inf_gpu_min"] for t in r["tiers"].values()) / 60
        return [f"{c['cold_start_min']:g} min", label, n(hi["inf_throttled"]),
                pct(hi["inf_throttled"] / hi["inf_requests"], 3) if hi["inf_requests"] else "-",
                pct(nr["inf_throttled"] / nr["inf_requests"], 3) if nr["inf_requests"] else "-",
                n(hi["inf_late"] + nr["inf_late"]), n(svc), n(r["tiers"]["normal"]["unmet_gpu_min"]),
                n(r["tiers"]["low"]["unmet_gpu_min"]), pct(r["utilization"])]

    def gap(c: dict, label: str, g: dict, r: dict) -> list[str]:
        eq, g0 = g.get("high_throttled_gap_closed_equal_gpu"), g.get("high_throttled_gap_closed")
        judged = c["cold_start_min"] >= tg["from_cold_start_min"]
        v = ("-" if not judged else "no point at equal GPU-hours" if eq is None
             else f"{verdict(eq >= tg['gap_closed_min'])}; goal {pct(tg['gap_closed_goal'], 0)}: "
                  f"{verdict(eq >= tg['gap_closed_goal'])}")
        at = g.get("reactive_high_throttled_at_predictive_gpu")
        un = g.get("reactive_unmet_gpu_min_at_predictive_gpu")
        ok = g.get("batch_unmet_no_higher_equal_gpu")
        unmet = "-" if un is None else " / ".join(
            f"{n(r['tiers'][t]['unmet_gpu_min'])} vs {'-' if un[t] is None else n(un[t])}" for t in ("normal", "low"))
        return [f"{c['cold_start_min']:g} min", label, "-" if g0 is None else pct(g0), "-" if at is None else n(at),
                "-" if eq is None else pct(eq), v, unmet,
                "-" if not judged or un is None else "no point at equal GPU-hours" if ok is None else verdict(ok)]

    for c in d["cases"]:
        q0 = c.get("replica_quantile")
        for s in ("reactive", "predictive", "perfect"):
            rows.append(row(c, s + (qname(q0) if s == "predictive" else ""), c["runs"][s]))
        gaps.append(gap(c, "predictive" + qname(q0), c, c["runs"]["predictive"]))
        for q, r in c.get("predictive_at_replica_quantile", {}).items():
            rows.append(row(c, "predictive" + qname(float(q)), r))
            gaps.append(gap(c, "predictive" + qname(float(q)), r, r))
        for q, r in c.get("predictive_product", {}).items():   # what the daemon and `simulate` run
            label = f"predictive (replicas at p{100 * float(q):g}, the product's choice: {_product_name(r)})"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_product_gated")
        if r is not None:  # the product's choice with the skill gate on (policy.skill_gate.enabled)
            label = (f"predictive (replicas at p{100 * float(r['replica_quantile']):g}, the product's choice, "
                     "skill gate on)")
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_high_tier_ahead")
        if r is not None:  # policy.replica_ahead_tiers = [high]
            label = "predictive (" + ("" if q0 is None else f"replicas at p{100 * q0:g}, ") + \
                "ahead for the high tier only)"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_seasonal")
        if r is not None:  # one change: the forecaster
            label = "predictive (" + ("" if q0 is None else f"replicas at p{100 * q0:g}, ") + \
                f"forecaster {r['forecaster']})"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_windows")
        if r is not None:  # one change: the forecaster retrain chooses on the services' 10-minute windows
            label = "predictive (" + ("" if q0 is None else f"replicas at p{100 * q0:g}, ") + \
                f"forecaster {r['choice']['candidate']} on {r['choice']['step_s'] // 60:g}-minute windows)"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        for q, r in c.get("predictive_windows_seasonal", {}).items():
            name = r["forecaster"].rsplit("@", 1)[0]   # the model, not Resampled's "@600s"
            label = f"predictive (replicas at p{100 * float(q):g}, forecaster {name} on 10-minute windows)"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_windows_seasonal_batch_reactive")
        if r is not None:  # the last of those with forecast_for = services
            name = r["forecaster"].rsplit("@", 1)[0]
            label = (f"predictive (replicas at p{100 * float(r['replica_quantile']):g}, forecaster {name} on "
                     "10-minute windows, batch tenants planned reactively)")
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
        r = c.get("predictive_batch_reactive")
        if r is not None:  # the replay knob forecast_for = services
            label = "predictive (" + ("" if q0 is None else f"replicas at p{100 * q0:g}, ") + \
                "batch tenants planned reactively)"
            rows.append(row(c, label, r))
            gaps.append(gap(c, label, r, r))
    days = f"{d['days']:g} day{'s' if d['days'] != 1 else ''}"
    windows = sorted({f"{c['inference']['scale_down_stabilization_s']:g}" for c in d["cases"]
                      if "scale_down_stabilization_s" in c.get("inference", {})})
    hist = d.get("history_days", 2)
    chose = ', '.join(sorted({c['forecaster'] for c in d['cases']}))
    out = [f"ServeGen m-small, {days} replayed after {hist:g} days of history, seed {d['seed']}, the forecaster the "
           f"daemon chooses at start-up for every tenant ({chose}"
           + (", as before forecaster.services: `kind = \"same\"`; the product's choice rows run the services on "
              "their window means)" if any("predictive_product" in c for c in d["cases"]) else ")") + "; the same "
           f"cluster ({', '.join(sorted({n(c['capacity_gpus']) for c in d['cases']}))} GPUs) for every strategy"
           + ("." if not windows else f"; every strategy's services scale down after a {'/'.join(windows)} s "
              "window (an HPA's scale-down stabilization; scale-up at once)."), "",
           table(["cold start", "strategy", "high-tier throttled", "share", "normal-tier throttled share",
                  "late (high + normal)", "services' GPU-hours", "normal-tier unmet GPU-min",
                  "low-tier (batch) unmet GPU-min", "utilization"], rows), "",
           table(["cold start", "predictive", "gap to perfect closed (default headroom)",
                  "reactive's high-tier throttled at predictive's GPU-hours", "gap closed at equal GPU-hours",
                  f"target >= {pct(tg['gap_closed_min'], 0)} (cold starts >= {tg['from_cold_start_min']:g} min)",
                  "normal / low unmet GPU-min: predictive vs reactive at its GPU-hours",
                  "target: batch unmet no higher"], gaps)]
    product = _product(d)
    if product:
        out += ["", product]
    gated = _product_gated(d)
    if gated:
        out += ["", gated]
    split = _batch_split(d)
    if split:
        out += ["", split]
    ceiling = _rate_ceiling(d)
    if ceiling:
        out += ["", *ceiling]
    out += ["", source(["inference_servegen.json"], d)]
    return "\n".join(out)


def _product_name(r: dict) -> str:
    """The product's forecaster in short: "<main> for batch, <services' model> on 10-minute windows for the
    services" (Resampled's "@600s" said in minutes)."""
    main, _, svc = r["forecaster"].partition(" | services: ")
    if not svc:
        return main
    model, _, step = svc.rpartition("@")
    return f"{main} for batch, {model} on {int(step.rstrip('s')) // 60:g}-minute windows for the services"


def _product(d: dict) -> str:
    """One sentence: the share of the gap to perfect that the product's choice closes at equal GPU-hours, per cold
    start and replica quantile, against the target; empty where the JSON has no product rows."""
    tg = d["targets"]
    cases = [c for c in d["cases"] if c.get("predictive_product")]
    if not cases:
        return ""
    per = []
    for q in cases[0]["predictive_product"]:
        got = [(c["cold_start_min"], c["predictive_product"][q].get("high_throttled_gap_closed_equal_gpu"))
               for c in cases]
        judged = [g for m, g in got if m >= tg["from_cold_start_min"]]
        met = bool(judged) and all(g is not None and g >= tg["gap_closed_min"] for g in judged)
        per.append(f"at p{100 * float(q):g} replicas " + " / ".join("-" if g is None else pct(g) for _, g in got)
                   + f" (target >= {pct(tg['gap_closed_min'], 0)} from {tg['from_cold_start_min']:g} min: "
                     f"{verdict(met)})")
    mins = " / ".join(f"{c['cold_start_min']:g}" for c in cases)
    return (f"The product's choice (what the daemon and `simulate` run: forecaster.services, "
            f"docs/forecasting.md#inference-services) closes of the gap from reactive to the perfect forecast at "
            f"equal GPU-hours, at {mins} min cold start: " + "; ".join(per) + ".")


def _product_gated(d: dict) -> str:
    """One sentence: the product's choice with the skill gate on (``predictive_product_gated``, the product's own
    way to plan a tenant reactively where its forecast has shown no skill) against both of issue 40's targets, per
    cold start: the gap closed at equal GPU-hours and the batch tiers' unmet against reactive's there. Empty where
    the JSON has no such row."""
    tg = d["targets"]
    cases = [c for c in d["cases"] if c.get("predictive_product_gated")]
    if not cases:
        return ""
    q = cases[0]["predictive_product_gated"]["replica_quantile"]
    per, gap_ok, batch_ok = [], [], []
    for c in cases:
        r = c["predictive_product_gated"]
        eq, un, ok = (r.get("high_throttled_gap_closed_equal_gpu"), r.get("reactive_unmet_gpu_min_at_predictive_gpu"),
                      r.get("batch_unmet_no_higher_equal_gpu"))
        if c["cold_start_min"] >= tg["from_cold_start_min"]:   # the targets hold from this cold start on
            gap_ok.append(eq is not None and eq >= tg["gap_closed_min"])
            batch_ok.append(ok is True)
        unmet = "no point at equal GPU-hours" if un is None else " / ".join(
            f"{n(r['tiers'][t]['unmet_gpu_min'])} vs {'-' if un[t] is None else n(un[t])}" for t in ("normal", "low"))
        per.append(f"{c['cold_start_min']:g} min: gap {'-' if eq is None else pct(eq)}, batch unmet (normal / low) "
                   f"{unmet}")
    return ("With the skill gate on (policy.skill_gate.enabled, docs/forecasting.md#the-skill-gate-act-on-the-"
            f"forecast-only-where-it-has-skill), the product's choice at p{100 * q:g} replicas: " + "; ".join(per)
            + f" (reactive's read off at its GPU-hours). Gap target >= "
            f"{pct(tg['gap_closed_min'], 0)} from {tg['from_cold_start_min']:g} min: "
            f"{verdict(bool(gap_ok) and all(gap_ok))}; batch unmet no higher than reactive's from "
            f"{tg['from_cold_start_min']:g} min at {batch_ok.count(True)} of {len(batch_ok)} cold starts: "
            f"{verdict(bool(batch_ok) and all(batch_ok))}.")


def _batch_split(d: dict) -> str:
    """One sentence: at how many cold starts predictive's batch unmet is no higher than reactive's at equal GPU-hours,
    as run and with the batch tenants planned reactively (``predictive_batch_reactive``); empty where the JSON has
    no such run."""
    cases = [c for c in d["cases"] if "predictive_batch_reactive" in c]
    if not cases:
        return ""
    ok = [c.get("batch_unmet_no_higher_equal_gpu") is True for c in cases]
    split = [c["predictive_batch_reactive"].get("batch_unmet_no_higher_equal_gpu") is True for c in cases]
    per = "; ".join(
        f"{c['cold_start_min']:g} min: normal " + " / low ".join(
            f"{n(c['runs']['predictive']['tiers'][t]['unmet_gpu_min'])} -> "
            f"{n(c['predictive_batch_reactive']['tiers'][t]['unmet_gpu_min'])}" for t in ("normal", "low"))
        + f", preemptions {n(c['runs']['predictive']['preemptions'])} -> "
          f"{n(c['predictive_batch_reactive']['preemptions'])}" for c in cases)
    return (f"Where predictive's batch unmet comes from: with the batch tenants planned reactively and the services "
            f"on the forecast (`forecast_for = services`), the batch tiers' unmet is no higher than reactive's at "
            f"equal GPU-hours at {split.count(True)} of {len(cases)} cold starts ({ok.count(True)} of {len(cases)} as "
            f"predictive runs): {per} (batch unmet GPU-min, normal / low, as run -> batch planned reactively).")


def _rate_ceiling(d: dict) -> list[str]:
    """The perfect-rate rows (bench/inference_bench.py ``perfect_rate``): per cold start what the perfect forecast
    knowing the services' window rates, not the minutes' draws, closes of reactive's gap at equal GPU-hours, beside
    predictive's; and one sentence saying whether that ceiling reaches the target. Empty where the JSON has none."""
    tg = d["targets"]
    cases = [c for c in d["cases"] if "perfect_rate" in c]
    if not cases:
        return []
    rows = []
    for c in cases:
        pr = c["perfect_rate"]
        pts = "; ".join(f"{h}: {n(r['tiers']['high']['inf_throttled'])} at "
                        f"{n(sum(t['inf_gpu_min'] for t in r['tiers'].values()) / 60)} h"
                        + ("" if r["high_throttled_gap_closed_equal_gpu"] is None
                           else f", {pct(r['high_throttled_gap_closed_equal_gpu'])}")
                        for h, r in pr["at_headroom"].items())
        mx, at = pr["gap_closed_equal_gpu_max"], pr["gap_closed_at_predictive_gpu"]
        eq = c.get("high_throttled_gap_closed_equal_gpu")
        now = (pr.get("nowcast") or {}).get("high_throttled_gap_closed_equal_gpu")
        rows.append([f"{c['cold_start_min']:g} min", pts, "-" if mx is None else pct(mx),
                     "-" if at is None else pct(at), "-" if now is None else pct(now), "-" if eq is None else pct(eq)])
    judged = [c for c in cases if c["cold_start_min"] >= tg["from_cold_start_min"]]
    ceil = [c["perfect_rate"]["gap_closed_at_predictive_gpu"] for c in judged]
    ceil = [x for x in ceil if x is not None]
    pred = [c["high_throttled_gap_closed_equal_gpu"] for c in judged if c.get("high_throttled_gap_closed_equal_gpu")
            is not None]
    out = [table(["cold start", "perfect-rate per HPA headroom: high-tier throttled at services' GPU-hours, gap "
                  "closed at equal GPU-hours", "largest gap closed at equal GPU-hours",
                  "gap closed at predictive's GPU-hours",
                  "nowcast (the rate now, no foresight): gap closed at its GPU-hours",
                  "predictive's at equal GPU-hours"], rows)]
    now = [(c["perfect_rate"].get("nowcast") or {}).get("high_throttled_gap_closed_equal_gpu") for c in judged]
    now = [x for x in now if x is not None]
    if ceil and pred:
        reach = min(ceil) >= tg["gap_closed_min"]
        out += ["", f"At cold starts of {tg['from_cold_start_min']:g} minutes or more, knowing the rates closes "
                f"{pct(min(ceil))} to {pct(max(ceil))} of the gap at predictive's GPU-hours, predictive "
                f"{pct(min(pred))} to {pct(max(pred))}"
                + ("" if not now else f", and knowing only the rate now (the nowcast) {pct(min(now))} to "
                   f"{pct(max(now))}, so what closes the gap is seeing the next windows' rates coming") + ": " + (
                    f"the {pct(tg['gap_closed_min'], 0)} target is within what a forecast of the rate can reach, "
                    "so the shortfall is the forecast's, not the draws'." if reach else
                    f"even a perfect forecast of the rate stays under the {pct(tg['gap_closed_min'], 0)} target: "
                    "the rest of the gap is the minutes' draws, which no forecast of the rate sees.")]
    return out


SEEDS_JSON = "inference_servegen_seeds.json"
SEEDS_FITTED_JSON = "inference_servegen_seeds_fitted.json"


def _read_off(points: list[tuple[float, float]], gpu: float) -> float | None:
    """A value of reactive's at ``gpu`` service GPU-minutes, linear between its headrooms' (gpu, value) points, None
    outside their span: bench/inference_bench.py's at_equal_gpu, for the figures the bench keeps as points only
    (the high tier's batch unmet, the preemptions)."""
    pts = sorted(points)
    for (g0, v0), (g1, v1) in zip(pts, pts[1:]):
        if g0 <= gpu <= g1:
            return v0 if g1 == g0 else v0 + (v1 - v0) * (gpu - g0) / (g1 - g0)
    return None


def seed_verdicts(r: dict, gap_min: float) -> dict:
    """One multi-seed run's checks, computed here from its figures and the JSON's goal: the gated product's gap
    closed at equal GPU-hours at least ``gap_min``, each batch tier's (normal, low) unmet no higher than reactive's
    read off there, and the two together no higher. None where reactive's headrooms do not span its GPU-hours."""
    g = r["predictive_product_gated"]
    eq, un = g.get("high_throttled_gap_closed_equal_gpu"), g.get("reactive_unmet_gpu_min_at_predictive_gpu") or {}
    batch = ("normal", "low")
    spanned = all(un.get(t) is not None for t in batch)
    mine = {t: g["tiers"][t]["unmet_gpu_min"] for t in batch}
    return {"gap": None if eq is None else eq >= gap_min,
            "each": None if not spanned else all(mine[t] <= un[t] for t in batch),
            "together": None if not spanned else sum(mine.values()) <= sum(un[t] for t in batch)}


@block("replay-inference-seeds")
def replay_inference_seeds() -> str:
    """The gated product over several draws of ServeGen's workload (bench/inference_bench.py --only-gated-product
    --seeds): per seed and cold start its high-tier throttled requests, the gap closed at equal GPU-hours, each
    batch tier's unmet and preemptions against reactive's read off at its service GPU-hours, the three checks,
    and how many runs meet each."""
    return _seeds_table(SEEDS_JSON)


@block("replay-inference-seeds-fitted")
def replay_inference_seeds_fitted() -> str:
    """The same runs with each request drawn from its window's fitted inter-arrival family (``--arrivals
    fitted``), as ServeGen's own generator draws them."""
    out = _seeds_table(SEEDS_FITTED_JSON)
    if not exists(SEEDS_FITTED_JSON) or not exists(SEEDS_JSON):
        return out
    counts = {}
    for name in (SEEDS_JSON, SEEDS_FITTED_JSON):
        d = load(name)
        got = [seed_verdicts(r, d["targets"]["gap_closed_min"]) for r in d["runs"]]
        counts[name] = (len(got), *(sum(o[k] is True for o in got) for k in ("gap", "each", "together")))
    (n0, *m), (n1, *f) = counts[SEEDS_JSON], counts[SEEDS_FITTED_JSON]
    c0, c1 = load(SEEDS_JSON).get("commit"), load(SEEDS_FITTED_JSON).get("commit")
    line = (f"Against the moment-matched draws (the table above, the same seeds and cold starts): the gap target met "
            f"on {f[0]} of {n1} runs here and {m[0]} of {n0} there, each batch tier no higher on {f[1]} and {m[1]}, "
            f"normal + low together on {f[2]} and {m[2]}"
            + ("." if c0 == c1 else f" (the two runs are of commits {c0} and {c1}: the code differs too, not only "
               "the draw).") + f" The counts differ by at most {max(abs(a - b) for a, b in zip(f, m))} runs of {n1}; "
            "`--arrivals` stays `moments` by default (the other ServeGen tables are of that draw), `fitted` is there "
            "to check a result on ServeGen's own.")
    head, sep, tail = out.rpartition("\n\n*From ")
    return head + "\n\n" + line + sep + tail


def _seeds_table(name: str) -> str:
    """One multi-seed JSON's table and counts (``replay_inference_seeds``)."""
    if not exists(name):
        return "*No multi-seed run committed yet: `bench/out/" + name + "` is missing.*"
    d = load(name)
    tg = d["targets"]

    def v(ok: bool | None) -> str:
        return "no point at equal GPU-hours" if ok is None else verdict(ok)

    def vs(mine: float, theirs: float | None) -> str:
        return f"{n(mine)} vs {'-' if theirs is None else n(theirs)}"

    rows, got = [], []
    for r in d["runs"]:
        g, case = r["predictive_product_gated"], r
        react = case["runs"]["reactive"]
        pts = [(sum(t["inf_gpu_min"] for t in react["tiers"].values()), react["tiers"]["high"]["unmet_gpu_min"],
                react["preemptions"])] + [(p["service_gpu_min"], p["unmet_gpu_min"]["high"], p["preemptions"])
                                          for p in case["reactive_headrooms"].values()]
        gpu = sum(t["inf_gpu_min"] for t in g["tiers"].values())
        high_unmet = _read_off([(x, h) for x, h, _ in pts], gpu)
        pre = _read_off([(x, k) for x, _, k in pts], gpu)
        un = g.get("reactive_unmet_gpu_min_at_predictive_gpu") or {}
        mine = {t: g["tiers"][t]["unmet_gpu_min"] for t in ("high", "normal", "low")}
        both = None if any(un.get(t) is None for t in ("normal", "low")) else un["normal"] + un["low"]
        eq = g.get("high_throttled_gap_closed_equal_gpu")
        ok = seed_verdicts(r, tg["gap_closed_min"])
        got.append(ok)
        rows.append([str(r["seed"]), f"{r['cold_start_min']:g} min",
                     vs(g["tiers"]["high"]["inf_throttled"], g.get("reactive_high_throttled_at_predictive_gpu"))
                     + f" / {n(case['runs']['perfect']['tiers']['high']['inf_throttled'])}",
                     "-" if eq is None else pct(eq), vs(mine["high"], high_unmet), vs(mine["normal"], un.get("normal")),
                     vs(mine["low"], un.get("low")), vs(mine["normal"] + mine["low"], both), vs(g["preemptions"], pre),
                     v(ok["gap"]), v(ok["each"]), v(ok["together"])])
    total = len(got)
    count = {k: sum(o[k] is True for o in got) for k in ("gap", "each", "together")}
    every = sum(all(x is True for x in o.values()) for o in got)
    complete = "" if d.get("complete") else " (the run stopped before its last seed: these are the runs it finished)"
    q = d["replica_quantile"]
    out = [table(["seed", "cold start", "high-tier throttled: gated vs reactive at equal GPU-hours / perfect",
                  "gap closed at equal GPU-hours", "high-tier batch unmet GPU-min: gated vs reactive",
                  "normal unmet: gated vs reactive", "low unmet: gated vs reactive",
                  "normal + low: gated vs reactive", "preemptions: gated vs reactive",
                  f"gap >= {pct(tg['gap_closed_min'], 0)}", "each batch tier no higher",
                  "normal + low no higher"], rows), "",
           f"Over seeds {', '.join(str(s) for s in d['seeds'])} at cold starts "
           f"{' / '.join(f'{c:g}' for c in d['cold_starts_min'])} min"
           + ("" if d.get("arrivals", "moments") == "moments" else ", each request drawn from its window's fitted "
              "inter-arrivals") +
           f", the product's choice at p{100 * q:g} replicas "
           f"with the skill gate on meets the gap target (>= {pct(tg['gap_closed_min'], 0)} at equal GPU-hours) on "
           f"{count['gap']} of {total} runs, each batch tier's unmet no higher than reactive's on {count['each']} of "
           f"{total}, normal + low together no higher on {count['together']} of {total}, and all three on {every} "
           f"of {total}{complete}."]
    noise = seeds_noise(d)
    out += ["", noise] if noise else []
    out += ["", source([name], d)]
    return "\n".join(out)
