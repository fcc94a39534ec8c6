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
    room = [r for r in reasons if "to make room on one node for a protected tenant's job ahead of forecast peak" in r]
    assert room and all(r.endswith("the free GPUs are not on a node it fits") for r in room), room[:1]
