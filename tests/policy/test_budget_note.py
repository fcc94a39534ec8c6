"""A protected job the plan finds no room for because the preemption budget's whole bucket is smaller than the job says
so. First-day walk (hday3): a 32-GPU Kubernetes cluster, a high-tier 8-GPU Job waiting behind low-tier 8-GPU pods; the
default policy.preempt_budget_share (2%) is 0 whole GPUs there, so nothing was ever preempted and the note said only
"1 protected job has no place yet (budget, candidates or topology)"."""

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from tests.policy.test_cost_aware import cluster, rise


def test_a_budget_smaller_than_one_job_is_named_with_the_share_that_lets_one_through():
    fc = rise(1, 60, base=16.0, top=16.0)           # the high tenant's 8 running + 8 waiting now
    st = cluster(high_pending=1)                    # 16 GPUs: n0 its job, n1 eight 1-GPU low jobs; one 8-GPU job waits
    small = plan(fc, st, PolicyMemory(), Config(policy={"headroom": 0.0}))
    assert small.preemptions == ()
    assert ("1 protected job has no place yet: the preemption budget (2% of 16 GPUs, policy.preempt_budget_share: "
            "0 GPUs per 30 s) is less than one 8-GPU job, so nothing is preempted for it; at least 50% lets one "
            "through") in small.notes
    big = plan(fc, st, PolicyMemory(), Config(policy={"headroom": 0.0, "preempt_budget_share": 0.5}))
    assert sum(p.gpus for p in big.preemptions) == 8 and not any("no place yet" in n for n in big.notes)
