"""A preemption's reason is read by the tenant it preempts (notices, Slurm comments, Kubernetes Events): the figure
it gives must mean something. On `run --sim` the log read "low-priority job preempted to clear -22 GPUs ahead of
forecast peak": the placement-aware choice clears room on one node for a protected job even when the cluster's free
GPUs, counted together, cover the GPUs short (spread over nodes the job does not fit), and the reason printed that
count, 0 or below."""

import re

import tests.support.policy_golden as golden
from daemon.policy import plan as real_plan


def test_a_preemption_never_claims_to_clear_zero_or_fewer_gpus(monkeypatch):
    reasons: list[str] = []

    def recording(*args, **kwargs):
        p = real_plan(*args, **kwargs)
        reasons.extend(x.reason for x in p.preemptions)
        reasons.extend(n.message for n in p.notifications if n.kind == "preempted")
        return p

    monkeypatch.setattr(golden, "plan", recording)
    golden.drive("plain")   # the pinned policy run (tests/support/policy_golden.py): per-tenant holds, on nodes
    counts = [int(m.group(1)) for r in reasons for m in re.finditer(r"to clear (-?\d+) GPU", r)]
    assert counts and min(counts) > 0, sorted(set(counts))[:5]
    room = [r for r in reasons if "to make room on one node for a protected tenant's job" in r]
    assert room and all(r.endswith("the free GPUs are not on a node it fits") for r in room), room[:1]


def _reasons(monkeypatch, case: str, **kwargs) -> list[str]:
    reasons: list[str] = []

    def recording(*args, **kw):
        p = real_plan(*args, **kw, **kwargs)
        reasons.extend(x.reason for x in p.preemptions)
        return p

    monkeypatch.setattr(golden, "plan", recording)
    golden.drive(case)
    return reasons


def test_a_preemption_for_tenants_the_skill_gate_plans_reactively_claims_no_forecast(monkeypatch):
    """Found on `make run` with policy.skill_gate on: every tenant planned reactively (no forecast scored yet), yet
    every preemption said "... ahead of forecast peak (p90 within 3 steps) for protected tenants". A reactive tenant's
    jobs are cleared for only for its jobs waiting now (and aged tenants', floors'), and the reason says so."""
    reasons = _reasons(monkeypatch, "plain", acting=frozenset())   # the gate: no tenant acts on the forecast
    assert reasons, "the case must preempt"
    assert not [r for r in reasons if "forecast" in r], [r for r in reasons if "forecast" in r][:2]
    assert any("for protected tenants' jobs waiting now" in r for r in reasons), reasons[:2]


def test_the_reason_names_the_forecast_only_where_the_need_is_the_forecasts(monkeypatch):
    reasons = _reasons(monkeypatch, "default")                      # the gate off: the high tier on its forecast
    assert any(r.endswith("ahead of forecast peak (p90 within 3 steps) for protected tenants") for r in reasons)
    # aged tenants' and floors' needs are what waits now, not the forecast's
    assert any(r.endswith("for protected tenants' jobs waiting now") for r in reasons), sorted(set(reasons))[:5]
    assert any(r.endswith("for protected tenants' floors an operator set") for r in reasons), sorted(set(reasons))[:5]


def test_a_job_cleared_for_an_aged_tenant_does_not_read_forecast_peak(monkeypatch):
    """Found on `make run`: tenant-0007's job was preempted for another low tenant that aging protects (its job waited
    max_wait: a job waiting now) in a plan that also cleared jobs for the high tier's forecast, and its reason read
    "... for protected tenants' jobs waiting now and forecast peak (p90 within 3 steps)": the plan's needs, not its
    job's, and nothing told it that the GPUs went to starving work. Each job's reason is the need of the tenant it was
    cleared for (Preemption.for_tenant), an aged tenant's said as such."""
    seen: list[tuple[str, str, str]] = []   # (tier of the tenant cleared for, reason, notice)

    def recording(*args, **kw):
        p = real_plan(*args, **kw)
        tier = dict(zip(args[1].tenants, args[1].tiers))
        notes = {n.message.split(" ")[1]: n.message for n in p.notifications if n.kind == "preempted"}
        seen.extend((tier[x.for_tenant], x.reason, notes[x.job_id]) for x in p.preemptions if x.for_tenant)
        return p

    monkeypatch.setattr(golden, "plan", recording)
    golden.drive("plain")   # the pinned run where one plan clears for both (tests/support/policy_golden.py)
    low = [(r, n) for t, r, n in seen if t != "high"]
    assert low and any(t == "high" and "forecast" in r for t, r, _ in seen)   # both kinds, in the same run
    assert not [r for r, n in low if "forecast" in r or "forecast" in n], [r for r, _ in low if "forecast" in r][:2]
    # and the tenant learns its job made room for starving work, not for the high tier (it names no tenant)
    assert any(r.endswith("for protected tenants' jobs waiting past max_wait (anti-starvation)") for r, _ in low)
