"""The settings a replay sweep runs (`default_sweep`): each strategy over its own knobs, and the extra policy
settings (`WORTH_WEIGHT`, `LONG_PREEMPT_LEAD`) it runs beside them."""

from __future__ import annotations

from daemon.sim.replay_knobs import STRATEGIES

# GPU-minute unmet weighs 4 in retrain's replay cost (retrain.replay_tier_weights), so weighing forecast high-tier
# demand as 4 against work lost is the same trade; with the perfect forecast it moved the rule toward the rule off
WORTH_WEIGHT = 4.0
# and jobs preempted for the hold's whole lead window, not only the next 3 steps: clearing further ahead for a
# forecast rise (the cost-aware rule off, since it caps the lead at the drain). p90 only: at p50 the hold is the
# demand now, and what is preempted for never exceeds the hold
LONG_PREEMPT_LEAD = 10


def default_sweep(strategies=STRATEGIES) -> list[tuple[str, dict]]:
    """Each strategy over its own knob: static the pool share, reactive the headroom, predictive the quantile
    and the headroom (and the lead time, what is preempted for, and the cost-aware rule switched off), perfect
    the headroom (and the same, but the quantiles: its forecast has no spread). Both also run the cost-aware rule
    at `WORTH_WEIGHT` over the headrooms, so that weight is measured with the fitted forecasters, not only with
    the perfect forecast. And p90 (and the perfect forecast) preempting for the whole lead window
    (`LONG_PREEMPT_LEAD`, the rule off), beside the shorter `preempt_lead_steps = 1`.

    Every strategy that has a headroom is swept over the same headroom values: reactive alone had 0.1, 0.25 and
    0.4 before, so the comparison at reactive's best point found predictive's nearest setting on a coarser grid
    than reactive's own."""
    hs = (0.0, 0.05, 0.1, 0.15, 0.25, 0.4)
    grid = {
        "static": [{"reserve_share": s} for s in (0.1, 0.2, 0.3, 0.4)],
        "reactive": [{"headroom": h} for h in hs],
        # and a longer lead time for the hold (an hour, the forecast's horizon): more time for held nodes to
        # empty as their jobs end, so fewer preemptions, for more GPUs held; a lower quantile or a shorter lead
        # for what is preempted (the hold keeps the high quantile); and the cost-aware rule off, to show what it
        # changes end to end
        "predictive": [{"quantile": q, "headroom": h} for q in (0.5, 0.9, 0.99) for h in hs]
        + [{"quantile": q, "headroom": 0.05, "lead_time_steps": 60} for q in (0.5, 0.9)]
        + [{"quantile": 0.9, "headroom": h, "preempt_quantile": 0.5} for h in hs]
        + [{"quantile": q, "headroom": 0.05, "preempt_lead_steps": 1} for q in (0.5, 0.9)]
        + [{"quantile": q, "headroom": h, "preempt_cost_aware": False} for q in (0.5, 0.9) for h in hs]
        + [{"quantile": q, "headroom": h, "preempt_worth_weight": WORTH_WEIGHT} for q in (0.5, 0.9) for h in hs]
        + [{"quantile": 0.9, "headroom": h, "preempt_lead_steps": LONG_PREEMPT_LEAD, "preempt_cost_aware": False}
           for h in hs],
        "perfect": [{"headroom": h} for h in hs] + [{"headroom": h, "lead_time_steps": 60} for h in (0.0, 0.05)]
        + [{"headroom": 0.05, "preempt_lead_steps": 1}]
        + [{"headroom": h, "preempt_cost_aware": False} for h in hs]
        + [{"headroom": h, "preempt_worth_weight": WORTH_WEIGHT} for h in hs]
        + [{"headroom": h, "preempt_lead_steps": LONG_PREEMPT_LEAD, "preempt_cost_aware": False} for h in hs],
    }
    return [(s, k) for s in strategies for k in grid[s]]
