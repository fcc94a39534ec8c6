"""Replay output: a table for the terminal, JSON for machines, a PNG for people."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from daemon.sim.replay import StrategyResult


def table(results: dict[str, StrategyResult]) -> str:
    head = (f"{'strategy':<11} {'util':>6} {'hi unmet':>9} {'hi min':>7} {'lo wait':>8} {'lo p99':>7} "
            f"{'starve':>7} {'preempt':>8} {'lost':>8} {'thr hi':>7} {'thr nrm':>8} {'thr lo':>7} {'ms':>6}")
    unit = (f"{'':<11} {'%':>6} {'GPU-min':>9} {'':>7} {'min':>8} {'min':>7} {'min':>7} {'jobs':>8} "
            f"{'GPU-min':>8} {'%':>7} {'%':>8} {'%':>7} {'/cyc':>6}")
    rows = [head, unit]
    for r in results.values():
        s = r.summary()
        t = s["throttled_share"]
        rows.append(f"{s['strategy']:<11} {100 * s['mean_utilization']:>6.1f} {s['high_unmet_gpu_minutes']:>9.0f} "
                    f"{s['high_unmet_minutes']:>7d} {s['low_wait_mean_min']:>8.1f} {s['low_wait_p99_min']:>7.0f} "
                    f"{s['longest_starvation_min']:>7.0f} {s['preemptions']:>8d} {s['lost_gpu_minutes']:>8.0f} "
                    f"{100 * t['high']:>7.2f} {100 * t['normal']:>8.2f} {100 * t['low']:>7.2f} {s['decision_ms_mean']:>6.1f}")
    return "\n".join(rows)


def to_json(results: dict[str, StrategyResult], meta: dict, path: Path) -> dict:
    out = {**meta, "strategies": {k: v.summary() for k, v in results.items()}}
    o = out["strategies"]
    if "oracle" in o and "predictive" in o:
        out["predictive_vs_oracle_utilization"] = o["predictive"]["mean_utilization"] / max(o["oracle"]["mean_utilization"], 1e-9)
    if "reactive" in o and "predictive" in o:
        out["predictive_preemptions_vs_reactive"] = o["predictive"]["preemptions"] / max(o["reactive"]["preemptions"], 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


def figure(results: dict[str, StrategyResult], path: Path, title: str, max_points: int = 3000) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 2.3 * len(results)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], results.values()):
        n = len(r.high_wanted)
        stride = max(1, n // max_points)
        x = np.arange(n)[::stride] / 60.0
        ax.plot(x, np.asarray(r.high_wanted)[::stride], color="black", lw=1, label="high-tier demand")
        ax.plot(x, np.asarray(r.high_reserved)[::stride], color="tab:blue", lw=1, label="reserved for high tier")
        ax.fill_between(x, 0, np.asarray(r.unmet_high)[::stride], color="tab:red", alpha=0.6, label="high unmet")
        ax2 = ax.twinx()
        ax2.plot(x, 100 * np.asarray(r.util)[::stride], color="tab:green", lw=0.7, alpha=0.7, label="utilization %")
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("util %", fontsize=8)
        s = r.summary()
        ax.set_title(f"{r.name}: util {100 * s['mean_utilization']:.1f}%, high unmet {s['high_unmet_gpu_minutes']:.0f} "
                     f"GPU-min, {s['preemptions']} preemptions", fontsize=9)
        ax.set_ylabel("GPUs", fontsize=8)
    axes[0, 0].legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("hours")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=85)
    plt.close(fig)
    return path
