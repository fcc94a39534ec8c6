"""The fenced wrapper has a capability exactly when the wrapped actuator has it, under Python 3.12+'s Protocol
check too (it looks attributes up with inspect.getattr_static, which does not see ``__getattr__``): otherwise,
under HA, the failover would stop fencing nodes and job health stop commenting and reclaiming, silently."""

from __future__ import annotations

import inspect
import typing

import pytest

from daemon.actuators.base import (
    ActionReport,
    CommentsJobs,
    FencesNodes,
    ListsNodeJobs,
    ReclaimsJobs,
)
from daemon.ha.fencing import FencedActuator, LeaseGuard
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption
from tests.support.actuators import QuietActuator

CAPS = (FencesNodes, ReclaimsJobs, CommentsJobs, ListsNodeJobs)


def isinstance_312(obj: object, proto: type) -> bool:
    """runtime_checkable isinstance as Python >= 3.12 does it: every protocol member found by getattr_static."""
    attrs = getattr(proto, "__protocol_attrs__", None) or typing._get_protocol_attrs(proto)  # 3.11: no attribute
    for attr in attrs:
        try:
            inspect.getattr_static(obj, attr)
        except AttributeError:
            return False
    return True


class Full(QuietActuator):
    name, dry_run = "slurm", False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def fence_node(self, node, reason):
        self.calls.append(f"fence {node}")
        return ActionReport(self.name, False, actions=[f"fence {node}"])

    def reclaim(self, job_ids, reason):
        self.calls.append(f"reclaim {job_ids}")
        return ActionReport(self.name, False, actions=[f"scontrol requeue {j}" for j in job_ids])

    def comment(self, job_ids, text):
        self.calls.append(f"comment {job_ids}")
        return ActionReport(self.name, False)

    def jobs_on_node(self, node):
        return [("1", "t")]


class Bare(QuietActuator):
    name, dry_run = "redis", False


class Fence:
    def __init__(self, ok: bool = True) -> None:
        self.ok, self.asked, self.jobs = ok, [], []

    def fence(self, what, jobs=()):
        self.asked.append(what)
        self.jobs.append(tuple(jobs))
        return self.ok, "" if self.ok else "lease lost"

    def term(self):
        return 1


@pytest.mark.security
@pytest.mark.parametrize("proto", CAPS, ids=lambda p: p.__name__)
def test_a_fenced_actuator_has_the_capabilities_of_the_one_it_wraps_on_python_312_too(proto):
    assert isinstance_312(Full(), proto)                       # the check itself sees a plain actuator's method
    assert isinstance_312(FencedActuator(Full(), Fence()), proto)
    assert isinstance(FencedActuator(Full(), Fence()), proto)   # and the interpreter's own check
    assert not isinstance_312(FencedActuator(Bare(), Fence()), proto)
    assert not isinstance(FencedActuator(Bare(), Fence()), proto)


@pytest.mark.security
def test_the_capabilities_set_on_the_wrapper_are_still_fenced():
    inner, fence = Full(), Fence(ok=False)
    act = FencedActuator(inner, fence)
    for rep in (act.reclaim(["7"], "idle"), act.comment(["7"], "x"), act.fence_node("n1", "down")):
        assert rep.fenced and rep.errors
    assert inner.calls == [] and len(fence.asked) == 3
    fence.ok = True
    assert act.reclaim(["7"], "idle").actions == ["scontrol requeue 7"] and act.jobs_on_node("n1") == [("1", "t")]
    assert inner.calls == ["reclaim ['7']"]


class Termed(Fence):
    """A fence whose term the test sets, and no `token` attribute (the lease's private field)."""

    def __init__(self) -> None:
        super().__init__()
        self.now: int | None = 4

    def term(self):
        return self.now


@pytest.mark.security
def test_the_guard_reads_the_term_the_fence_declares():
    """The guard's term (what TermRecord keys the actuators' records by) is the Fence's term(); it was read from
    the fence's `token` attribute, so any other fence gave None in every term and the records outlived a
    takeover."""
    fence = Termed()
    guard = LeaseGuard(FencedActuator(Full(), fence))
    assert guard.term() == 4
    fence.now = None
    assert guard.term() is None
    fence.now = 9
    assert guard.term() == 9


@pytest.mark.security
def test_a_fence_without_a_term_is_refused_when_an_actuator_is_wrapped():
    class NoTerm:
        def fence(self, what, jobs=()):
            return True, ""

    with pytest.raises(TypeError, match=r"NoTerm is no Fence: it needs fence\(\) and term\(\)"):
        FencedActuator(Full(), NoTerm())


class Recording(Bare):
    """The three calls every actuator has, each recorded when it reaches the actuator (a Redis limit write, a
    tenant's e-mail, a requeue): what a stale leader must never send."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def apply(self, plan):
        self.calls.append("apply")
        return ActionReport(self.name, False, actions=["apply"])

    def requeue(self, job_ids, reason):
        self.calls.append(f"requeue {job_ids}")
        return ActionReport(self.name, False)

    def notify(self, notes):
        self.calls.append(f"notify {len(notes)}")
        return ActionReport(self.name, False)


def _plan(preempt: tuple[str, ...]) -> Plan:
    return Plan(at="2024-01-01T00:00:00", capacity=8, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=tuple(Preemption(j, "t", 1, "n1", "x") for j in preempt), notifications=(),
                stale=False, forecast_model="m", notes=(), memory=PolicyMemory())


@pytest.mark.security
def test_a_stale_leader_sends_no_plan_requeue_or_notification_and_each_act_names_its_jobs_to_the_fence():
    """Each call that changes something asks the fence first, with the jobs it acts on (the lease writes them
    into its ledger, the audit of who did what under which token): a refused fence sends nothing, notifications
    to tenants included (a stale leader telling a tenant of a preemption the real leader did not make)."""
    inner, fence = Recording(), Fence(ok=False)
    act = FencedActuator(inner, fence)
    note = Notification("t", "preempted", "job 7 preempted")
    for rep in (act.apply(_plan(("7", "8"))), act.requeue(["9"], "node down"), act.notify([note])):
        assert rep.fenced and rep.errors
    assert inner.calls == []
    assert fence.jobs == [("7", "8"), ("9",), ()]
    assert act.notify([]).ok and inner.calls == ["notify 0"] and len(fence.asked) == 3  # none to send: not asked
    fence.ok = True
    assert act.apply(_plan(())).actions == ["apply"] and act.notify([note]).ok and act.requeue(["9"], "x").ok
    assert inner.calls == ["notify 0", "apply", "notify 1", "requeue ['9']"]


class Estimates(Bare):
    """An actuator that writes pending jobs' start estimates into the scheduler (Slurm's AdminComment, a Kueue
    Workload's annotations): a change to the cluster like any other."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def show_eta(self, rows, made_at):
        self.calls.append(f"show_eta {[r['job_id'] for r in rows]}")
        return ActionReport(self.name, False, actions=[f"estimate {r['job_id']}" for r in rows])


@pytest.mark.security
def test_start_estimates_are_written_only_under_the_lease_and_name_their_jobs_to_the_fence():
    """The wrapper passed show_eta through unchecked: a stale leader's estimates overwrote the real leader's in the
    scheduler whenever the actuator's own per-command check was missing or wrong. Now the wrapper asks first."""
    from daemon.actuators.base import ShowsEta

    inner, fence = Estimates(), Fence(ok=False)
    act = FencedActuator(inner, fence)
    assert isinstance(act, ShowsEta) and not isinstance(FencedActuator(Bare(), Fence()), ShowsEta)
    rows = [{"job_id": 7, "p50_s": 60.0, "p90_s": None, "basis": "x"}, {"job_id": "8", "p50_s": None,
                                                                       "p90_s": None, "basis": "y"}]
    rep = act.show_eta(rows, 0.0)
    assert rep.fenced and rep.errors and inner.calls == []
    assert fence.asked == ["redis: show_eta 2 pending jobs"]
    assert fence.jobs == [("7", "8")]
    fence.ok = True
    assert act.show_eta(rows, 0.0).actions == ["estimate 7", "estimate 8"] and inner.calls == ["show_eta [7, '8']"]


@pytest.mark.security
def test_start_estimates_passed_by_keyword_name_their_jobs_to_the_fence():
    inner, fence = Estimates(), Fence(ok=True)
    rows = [{"job_id": 3, "p50_s": 1.0, "p90_s": None, "basis": "x"}]
    assert FencedActuator(inner, fence).show_eta(rows=rows, made_at=0.0).actions == ["estimate 3"]
    assert fence.asked == ["redis: show_eta 1 pending job"] and fence.jobs == [("3",)]


@pytest.mark.security
def test_a_capability_the_wrapped_actuator_gains_after_wrapping_is_still_fenced():
    """The wrapper copies the capabilities it sees when it wraps; one set on the actuator later (an instance
    attribute) is found by __getattr__, and fenced there too."""
    inner, fence = Estimates(), Fence(ok=False)
    act = FencedActuator(inner, fence)
    inner.reclaim = lambda job_ids, reason: ActionReport(inner.name, False, actions=["reclaimed"])
    rep = act.reclaim(["5"], "idle")
    assert rep.fenced and rep.errors and fence.asked == ["redis: reclaim ['5'] idle"]
