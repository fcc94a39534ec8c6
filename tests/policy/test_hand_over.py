"""The node hand-over (daemon/policy/hand_over.py): which of the pool's nodes a growing hold takes from the shrinking
pool. One rule, called by the Kubernetes node holds and by the simulated cluster alike; pinned here on built
cases."""

from daemon.policy.hand_over import hand_over


def test_the_hold_takes_first_where_it_runs_most_then_where_the_least_firm_work_is_then_in_the_callers_order():
    #        0  1  2  3  4  5
    gpus = [8, 8, 8, 8, 8, 8]
    own = [1, 4, 4, 0, 8, 4]
    firm = [0, 2, 0, 0, 1, 0]
    # most own first (4: 8 GPUs of its own), then among 1, 2 and 5 (4 each) the least firm (2 and 5, in the
    # callers' order), then 1; 0 last; 3 never (it does not run there)
    assert hand_over(gpus, own, firm, grow=64, spare=64, job_gpus=1) == [4, 2, 5, 1, 0]
    # as many as the hold grows by (whole nodes: 9 GPUs take two) and the pool can spare
    assert hand_over(gpus, own, firm, grow=9, spare=64, job_gpus=1) == [4, 2]
    assert hand_over(gpus, own, firm, grow=64, spare=16, job_gpus=1) == [4, 2]
    assert hand_over(gpus, own, firm, grow=0, spare=64, job_gpus=1) == []
    assert hand_over(gpus, own, firm, grow=64, spare=7, job_gpus=1) == []


def test_a_node_where_the_holds_job_does_not_fit_beside_firm_work_is_not_taken():
    # its job of 7 GPUs fits beside 1 firm GPU on an 8-GPU node, not beside 2
    assert hand_over([8, 8, 8], [1, 1, 1], [2, 1, 0], grow=24, spare=24, job_gpus=7) == [2, 1]
    # a job is at least one GPU: a node full of firm work is never taken
    assert hand_over([8, 8, 8], [1, 1, 1], [8, 7, 0], grow=24, spare=24, job_gpus=0) == [2, 1]


def test_a_node_larger_than_what_the_pool_can_spare_is_passed_over_for_a_smaller_one():
    # the 16-GPU node, where the hold runs most, is more than the 8 the pool can spare: the 8-GPU one is taken
    assert hand_over([16, 8], [8, 4], [0, 0], grow=8, spare=8, job_gpus=1) == [1]
    assert hand_over([16, 8], [8, 4], [0, 0], grow=8, spare=16, job_gpus=1) == [0]
