"""The Kubernetes node holds' hand-over (NodeHolds._hand_over) is the one rule daemon/policy/hand_over.py gives the
simulator too (daemon/sim/cluster_holds.py). On built nodes, in dry run (no API call: the choice only; the real
control plane runs it in tests/k8s/test_node_holds.py and tests/actuators/test_k8s_kueue_windows.py).

Each test here failed on the actuator's own hand-over before it called the shared rule, which differed from the
simulator's in three ways: it took the pool nodes with the least firm work first (the simulator: where the hold runs
most, as both docstrings said); it stopped at a node larger than what the pool could spare (the simulator passed
over it for a smaller one); and it counted a NotReady or cordoned node as held, by the pool (what it can spare) and
by the hold (what it has), where ``apply`` and the simulator count it as let go."""

from kubernetes import client as k8s

from daemon.actuators.base import ActionReport
from daemon.actuators.k8s.node_holds import HoldNode, NodeHolds
from daemon.actuators.k8s.objects import POOL_VALUE


def _node(name: str, gpus: int = 8, usable: bool = True) -> HoldNode:
    return HoldNode(name, gpus, 0, usable, POOL_VALUE, "1", ())


def _hand_over(nodes: list[HoldNode], wanted: dict[str, int], by_tenant: dict, firm_of: dict | None = None,
               job_gpus: dict | None = None) -> dict[str, set[str]]:
    holds = NodeHolds(k8s.ApiClient(), label="gpu-autoscaler/hold", gpu_resource="nvidia.com/gpu",
                      tenants_ns={"team-a": "a", "team-b": "b"}, shrink_delay_s=0, dry_run=True)
    held = {POOL_VALUE: {n.name for n in nodes}, "team-a": set()}
    rep = ActionReport("kueue", True)
    holds._hand_over(rep, nodes, held, wanted, {POOL_VALUE: {"team-a", "team-b"}, "team-a": {"team-a"}},
                     by_tenant, firm_of or {}, job_gpus or {}, {})
    assert not rep.errors
    return held


def test_the_window_takes_the_pool_node_where_its_tenant_runs_most_not_the_one_with_the_least_firm_work():
    # team-a runs 4 GPUs on n1, beside 1 GPU of work that cannot be evicted, and 1 on n2: n1 is handed over
    held = _hand_over([_node("n1"), _node("n2"), _node("n3")], {POOL_VALUE: 16, "team-a": 8},
                      {"team-a": {"n1": 4, "n2": 1}}, firm_of={None: {"n1": 1}})
    assert held == {POOL_VALUE: {"n2", "n3"}, "team-a": {"n1"}}


def test_a_notready_pool_node_is_not_what_the_pool_can_spare():
    # the pool holds 16 usable GPUs and wants 16: it spares none (n3, NotReady, leaves the pool in apply)
    held = _hand_over([_node("n1"), _node("n2"), _node("n3", usable=False)], {POOL_VALUE: 16, "team-a": 8},
                      {"team-a": {"n1": 4}})
    assert held["team-a"] == set()


def test_a_pool_node_larger_than_the_pool_can_spare_is_passed_over_for_a_smaller_one_the_tenant_runs_on():
    held = _hand_over([_node("n1", 16), _node("n2", 8)], {POOL_VALUE: 16, "team-a": 8},
                      {"team-a": {"n1": 8, "n2": 4}})
    assert held == {POOL_VALUE: {"n1"}, "team-a": {"n2"}}
