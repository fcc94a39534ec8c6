"""Renderers for README.md: results at a glance (each bench's headline against its goal) and the folder map,
read from the packages' own docstrings."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bench.render.common import (
    ROOT,
    TRACES,
    _gain,
    block,
    exists,
    goal,
    load,
    met,
    ms,
    n,
    pct,
    table,
    value_at,
    verdict,
)
from bench.render.replay import _change, replay, replay_verdicts, verdict3


@block("results-at-a-glance")
def results() -> str:
    def shown(v: float, unit: str) -> str:
        return (f"{v:.3g} {unit}" if v < 10 else f"{v:,.0f} {unit}").strip()

    rows = []
    ft = load("forecast_traces.json")
    t15 = ft["targets"]["lstm_15pct_better"]
    ok = [name for name, t in ft["traces"].items() if met(t15, t)]
    rows.append(["[forecast](docs/benchmarks.md#forecaster): LSTM family against the best fair baseline (wQL), "
                 "real traces",
                 ", ".join(f"{TRACES[k].split(',')[0]} {_gain(t['gain_vs_best_baseline']).replace('**', '')}"
                           for k, t in ft["traces"].items()),
                 f"{pct(t15['value'], 0)} better", f"met on {len(ok)} of {len(ft['traces'])}"])
    short = {"high_unmet": "high-tier unmet", "normal_unmet": "normal-tier unmet", "preemptions": "preemptions",
             "preempted_idle": "preempted, then idle"}
    for case in ("synthetic", "helios"):
        d = replay(case)
        v = replay_verdicts(d)
        c = d["comparison"]
        rel = {k: t for k, t in d["targets"].items() if t.get("relative_to")}
        whose = {"reactive": "reactive's", "perfect": "the perfect forecast's"}

        def measured(t: dict) -> str:
            other = c[t["metric"]].get(t["relative_to"])
            return (f"{short[t['metric']]} {_change(t, c[t['metric']]['predictive'], other)}"
                    + ("" if t["relative_to"] == "reactive" else " of the perfect forecast's")
                    if other is not None else f"{short[t['metric']]}: no perfect-forecast setting to compare")

        rows.append([f"[replay](docs/replay.md#what-the-numbers-say), {case}: predictive against reactive at equal "
                     "utilization",
                     "; ".join(measured(t) for t in rel.values()),
                     "; ".join(f"no more than {whose[t['relative_to']]}" if t["value"] == 1 else
                               f"{t['op']} {pct(t['value'], 0)} of {whose[t['relative_to']]}" for t in rel.values()),
                     "; ".join(verdict3(v[k]) for k in rel)])
    lstm = ft["targets"]["lstm_p95"]
    rows.append(["[forecast call](docs/benchmarks.md#forecaster), LSTM, 1,000 tenants, p95",
                 ms(value_at(ft, lstm["metric"])), goal(lstm), verdict(met(lstm, ft))])
    for f, key, page, what in (("policy.json", "plan_p95", "benchmarks.md#policy-and-rate-limiting", "policy"),
                               ("failover.json", "via_alertmanager_5s", "benchmarks.md#failover-under-load",
                                "node failover under load"),
                               ("ha-takeover.json", "takeover_2_intervals", "high-availability.md#measured-takeover",
                                "HA"),
                               ("forecast_retrain_timing.json", "retrain_10min", "benchmarks.md#forecaster", "retrain"),
                               ("replay_scale.json", "scale_15min", "benchmarks.md#scale", "replay at scale")):
        d = load(f)
        t = d["targets"][key]
        label = t["what"]
        if d.get("by_select"):   # retrain timed per ranking rule: the default's stands for it here
            sys.path.insert(0, str(ROOT))
            from daemon.config.models import RetrainConfig

            sel = RetrainConfig().select_by
            d = {**d, **d["by_select"].get(sel, {})}
            label += f" (default `--select-by {sel}`; every rule: [forecaster](docs/benchmarks.md#forecaster))"
        rows.append([f"[{what}](docs/{page}): {label}", shown(value_at(d, t["metric"]), t.get("unit", "")), goal(t),
                     verdict(met(t, d))])
    cy = load("cycle-1000.json")
    s = cy["scenarios"]["incremental"]
    keys = ("cycle_p95_1s", "cold_start_60s", "rss_1_5gib")
    ts = [cy["targets"][k] for k in keys]
    rows.append([f"[the whole cycle against Prometheus](docs/benchmarks.md#the-whole-cycle-against-a-real-prometheus), "
                 f"{n(cy['tenants'])} tenants x {cy['days']:g} days: " + "; ".join(t["what"] for t in ts),
                 "; ".join(shown(value_at(s, t["metric"]), t["unit"]) for t in ts), "; ".join(goal(t) for t in ts),
                 "; ".join(verdict(met(t, s)) for t in ts)])
    rows += _new_claims(shown)
    return table(["measure", "measured", "goal", "verdict"], rows)


def _product_row(rows: list[list[str]], cases: list[dict], tg: dict, starts: str) -> None:
    """The row a user gets by default: the product's own choice (the services on their window model, batch on the
    forecaster chosen at start-up) with the replica autoscaler at the holds' quantile (policy.quantile, p90), where
    the JSON has it (bench/inference_bench.py's predictive_product)."""
    from daemon.config.models_policy import PolicyConfig

    q = f"{PolicyConfig().quantile:g}"
    got = [c.get("predictive_product", {}).get(q) for c in cases]
    if not got or None in got:
        return
    gaps = [g["high_throttled_gap_closed_equal_gpu"] for g in got]
    batch = [bool(g.get("batch_unmet_no_higher_equal_gpu")) for g in got]
    rows.append([f"[the same, the product's default](docs/forecasting.md#inference-services) (the services on "
                 f"their window model, batch on the start-up choice, replicas at p{float(q) * 100:g}), cold starts "
                 f"{starts} min", f"{'/'.join(pct(g, 0) for g in gaps)}; above reactive's at "
                 f"{batch.count(False)} of {len(batch)}",
                 f">= {pct(tg['gap_closed_min'], 0)} (goal {pct(tg['gap_closed_goal'], 0)}); no more than "
                 "reactive's", f"{verdict(min(gaps) >= tg['gap_closed_min'])}; {verdict(all(batch))}"])


def _gated_row(rows: list[list[str]], cases: list[dict], tg: dict, starts: str) -> None:
    """The product's default with the skill gate on (policy.skill_gate.enabled, off by default), where the JSON has
    it (bench/inference_bench.py's predictive_product_gated)."""
    got = [c.get("predictive_product_gated") for c in cases]
    if not got or None in got:
        return
    gaps = [g["high_throttled_gap_closed_equal_gpu"] for g in got]
    batch = [bool(g.get("batch_unmet_no_higher_equal_gpu")) for g in got]
    q = got[0].get("replica_quantile")
    rows.append([f"[the same, skill gate on](docs/forecasting.md#whom-the-gate-trusts-on-servegen) "
                 f"(`policy.skill_gate.enabled`, replicas at p{float(q) * 100:g}), cold starts {starts} min",
                 f"{'/'.join(pct(g, 0) for g in gaps)}; above reactive's at {batch.count(False)} of {len(batch)}",
                 f">= {pct(tg['gap_closed_min'], 0)} (goal {pct(tg['gap_closed_goal'], 0)}); no more than "
                 "reactive's", f"{verdict(min(gaps) >= tg['gap_closed_min'])}; {verdict(all(batch))}"])


def _gate_row(rows: list[list[str]]) -> None:
    """Issue 40's skill-gate checks per trace (predictive with the gate at reactive's utilization), at the margin
    docs/forecasting.md chooses (bench/gate_docs.py, the same JSON and rule), where the JSON is committed."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gate_docs

    files = {f: load(f) for _, f, _ in gate_docs.GATE_FILES if exists(f)}
    m = gate_docs.choose(files) if files else None
    got = []
    for case, f, role in gate_docs.GATE_FILES:
        c = files.get(f, {}).get("comparison", {}).get(gate_docs.variant(m)) if m is not None else None
        if not c or not c.get("predictive_point"):
            continue
        tg = c["targets"]
        kept = "" if "keeps_gain" not in tg or c.get("high_gain_kept") is None else \
            f" (high-tier gain kept {pct(c['high_gain_kept'], 0)})"
        got.append((f"{case}{' (unseen window)' if role == 'unseen' else ''} "
                    f"{sum(v is True for v in tg.values())} of {len(tg)}{kept}", verdict(bool(c["all_met"]))))
    if got:
        rows.append([f"[skill gate](docs/forecasting.md#the-gate-measured-in-the-replay) (`policy.skill_gate`, "
                     f"margin {m:g}), predictive at reactive's utilization: checks met per trace",
                     "; ".join(g for g, _ in got),
                     "every tier's unmet <= 105% of reactive's, the high tier's no higher, preemptions <= 110%; "
                     "where the forecast has skill (synthetic) >= 80% of the ungated high-tier gain kept",
                     "; ".join(v for _, v in got)])


def _new_claims(shown) -> list[list[str]]:
    """Issues 38-40's headline goals: inference services (ServeGen), the skill gate's checks, the GPUs for one SLO,
    the Kubernetes view at scale, the recurring windows and the start-time estimate, each read from its bench JSON
    (absent JSON: no row)."""
    rows = []
    if exists("inference_servegen.json"):
        d = load("inference_servegen.json")
        tg = d["targets"]
        cases = [c for c in d["cases"] if c["cold_start_min"] >= tg["from_cold_start_min"]]
        gaps = [c["high_throttled_gap_closed_equal_gpu"] for c in cases]
        batch = [bool(c.get("batch_unmet_no_higher_equal_gpu")) for c in cases]
        q = d["cases"][0].get("replica_quantile")
        starts = ", ".join(f"{c['cold_start_min']:g}" for c in cases)
        rows.append([f"[inference services](docs/replay.md#inference-services), ServeGen beside batch, cold starts "
                     f"{starts} min, one forecaster for every tenant (the start-up choice), "
                     f"replica autoscaler at p{q * 100:g}: "
                     "reactive's gap to perfect (high-tier throttled) closed at equal GPU-hours; batch unmet",
                     f"{'/'.join(pct(g, 0) for g in gaps)}; above reactive's at {batch.count(False)} of {len(batch)}",
                     f">= {pct(tg['gap_closed_min'], 0)} (goal {pct(tg['gap_closed_goal'], 0)}); no more than "
                     "reactive's",
                     f"{verdict(min(gaps) >= tg['gap_closed_min'])}; {verdict(all(batch))}"])
        _product_row(rows, cases, tg, starts)
        _gated_row(rows, cases, tg, starts)
        ceil = [c["perfect_rate"]["gap_closed_at_predictive_gpu"] for c in cases if "perfect_rate" in c]
        if ceil and None not in ceil:  # the most any forecast of the rate closes (bench/inference_bench.py)
            rows.append([f"[the same, a perfect forecast of the services' rates](docs/replay.md#inference-services) "
                         f"(not the minutes' draws), cold starts {starts} min: the gap closed at predictive's "
                         "GPU-hours, the most a forecast of the rate can close",
                         "/".join(pct(g, 0) for g in ceil), f">= {pct(tg['gap_closed_min'], 0)}: the target within "
                         "a forecast's reach", verdict(min(ceil) >= tg["gap_closed_min"])])
    _gate_row(rows)
    for case in ("synthetic", "servegen"):
        f = f"sizing_{case}.json"
        if not exists(f):
            continue
        d = load(f)
        ts = d.get("targets") or {}
        st = d.get("strategies") or {}
        for t in ts.values():
            saving = t.get("saving")
            rows.append([f"[GPUs for one SLO](docs/replay.md#the-gpus-each-strategy-needs-for-the-same-slo), {case} "
                         f"({d['steps'] / 60:.3g} h replayed): " + t["what"],
                         _no_saving(st, t.get("against", "")) if saving is None
                         else f"{pct(saving, 1)} fewer" if saving >= 0 else f"{pct(-saving, 1)} more",
                         f">= {pct(t['at_least'], 0)} fewer",
                         verdict(bool(t.get("met")))])
    if exists("k8s_scale.json"):
        d = load("k8s_scale.json")
        ts = list(d["targets"].values())
        rows.append([f"[Kubernetes at scale](docs/kubernetes.md#at-scale), {n(d['input']['nodes'])} KWOK nodes, "
                     f"{n(d['input']['pods'])} pods: " + "; ".join(t["what"] for t in ts),
                     "; ".join(shown(value_at(d, t["metric"]), t["unit"]) for t in ts),
                     "; ".join(goal(t) for t in ts), "; ".join(verdict(met(t, d)) for t in ts)])
    if exists("windows_synthetic_seeds.json"):   # docs/windows.md's verdict: the draws pooled
        d = load("windows_synthetic_seeds.json")
        p, c = d["pool"], d["pool"]["conditions"]
        cut = "no unmet to cut" if p["cut"] is None else f"cut {pct(p['cut'])}"
        rows.append([f"[recurring windows](docs/windows.md#windows-proposed-from-the-history), synthetic, "
                     f"{p['seeds']} seeds pooled: the proposed windows against predictive without them, the 14:00 "
                     "tenants' high-tier unmet; normal-tier unmet; preemptions",
                     f"{cut}; {p['normal_unmet_delta_gpu_min']:+,.0f} GPU-min; {p['preemptions_delta']:+d}",
                     f"cut >= {pct(d['target']['cut'], 0)}; no more; no more",
                     "; ".join(verdict(c[k]) for k in ("cut", "normal_unmet", "preemptions"))])
    for case in ("synthetic", "helios", "helios_unseen"):
        f = f"eta_{case}.json"
        if not exists(f):
            continue
        d = load(f)
        e, ts = d["eta"], d["targets"]
        cov, err = ts["p90_coverage_85_95"], ts["error_at_most_half_naive"]
        lo, hi = cov["value"]
        label = case.replace("_unseen", " (unseen window)")
        rows.append([f"[start-time estimate](docs/eta.md), {label}: p90 coverage of actual starts; p50 median error "
                     "against the naive estimate's",
                     f"{pct(e['p90_coverage'], 1)}; {e['error_vs_naive']:.2f}",
                     f"{pct(lo, 0)}-{pct(hi, 0)}; <= {err['value']:g}",
                     f"{verdict(lo <= e['p90_coverage'] <= hi)}; {verdict(e['error_vs_naive'] <= err['value'])}"])
    return rows


# folders that are not Python packages: what they hold (the packages say it in their own docstrings)
FOLDERS = {
    "models": "the shipped default model and its manifest; `retrain` writes new versions beside it",
    "bench": "benchmarks, their goals (targets.py), their JSON (out/), and render_docs.py, which renders every "
             "table of measured numbers in the docs from that JSON",
    "deploy": "config example, Prometheus scrape job, alert, recording and forecast rules with their promtool "
              "tests, Alertmanager route, Grafana dashboard, Redis ACL users (redis/users.acl)",
    "systemd": "gpu-autoscaler.service (Type=notify, watchdog, sandbox), the retrain service and its timer",
    "scripts": "install-services.sh: the Debian servers the tests start",
    "tests": "one folder per package; integration/ where every test starts a real server; support/ for the "
             "helpers (real servers, headless Chromium, the Kubernetes capture server) and data",
    "docs": "one page per concern",
}


def _summary(pkg: Path) -> str:
    """The first sentence of a package's docstring, on one line (its `__init__.py` says the rest)."""
    import ast

    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s+(?=[A-Z`(])", para, maxsplit=1)[0].rstrip(".")


def _wrapped(label: str, text: str, width: int = 116) -> list[str]:
    import textwrap

    lines = textwrap.wrap(text, width - 16) or [""]
    return [f"{label:<16}{lines[0]}"] + [" " * 16 + ln for ln in lines[1:]]


@block("folder-map")
def folder_map() -> str:
    """Where things are: the top-level folders, and each package of daemon/, from their own docstrings."""
    out = []
    for name in ("daemon", "forecaster", "gateway"):
        out += _wrapped(f"{name}/", _summary(ROOT / name))
        if name == "daemon":
            for sub in sorted(p for p in (ROOT / "daemon").iterdir() if (p / "__init__.py").exists()):
                out += _wrapped(f"  {sub.name}/", _summary(sub))
                for subsub in sorted(p for p in sub.iterdir() if (p / "__init__.py").exists()):
                    out += _wrapped(f"    {subsub.name}/", _summary(subsub))
    for name, text in FOLDERS.items():
        out += _wrapped(f"{name}/", text)
    return "```\n" + "\n".join(out) + "\n```"


def _no_saving(strategies: dict, against: str) -> str:
    """Why a sizing target has no saving: which of the two strategies met the SLO at no size tried (a floor no
    cluster size removes, or the top of the bracket), and the GPUs of the one that did."""
    def said(name: str) -> str:
        s = strategies.get(name) or {}
        return f"{name} {s['gpus']:,} GPUs" if s.get("met") else f"{name} meets it at no size tried"
    return f"no ratio: {said('predictive')}, {said(against)}"

