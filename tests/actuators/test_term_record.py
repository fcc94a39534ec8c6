"""TermRecord (daemon/actuators/base.py): an actuator's record of what it last wrote is kept for one fencing term
only, so a replica that leads again compares every object with its plan again instead of trusting what it sent
under its earlier term (another leader may have written since). The real-server cases: tests/k8s/test_quotas.py,
tests/k8s/test_kueue_windows_ha.py and tests/integration/test_slurm_actuator.py."""

from daemon.actuators.base import NO_FENCE, FenceGuard, TermRecord


class Term(FenceGuard):
    """A guard whose term the test sets (the lease's token in the daemon)."""

    def __init__(self, term: int | None) -> None:
        self.now = term

    def term(self) -> int | None:
        return self.now


def test_the_record_is_kept_within_a_term_and_forgotten_when_the_term_changes():
    guard = Term(1)
    sent: TermRecord[str, int] = TermRecord(lambda: guard)
    sent["team-a"] = 10
    sent["team-b"] = 4
    assert sent.get("team-a") == 10 and "team-b" in sent and len(sent) == 2
    guard.now = None                        # standing by: not the term it was written in
    assert sent.get("team-a") is None and len(sent) == 0
    sent["team-a"] = 10
    guard.now = 3                           # leading again, with a new token
    assert "team-a" not in sent and dict(sent) == {}
    sent["team-a"] = 40
    assert dict(sent.items()) == {"team-a": 40}
    del sent["team-a"]
    assert sent.pop("team-a", None) is None


def test_the_guard_is_asked_when_used_so_it_may_be_set_after_the_record_is_built():
    class Owner:
        def __init__(self) -> None:
            self.written: TermRecord[str, str] = TermRecord(lambda: self.guard)   # before the guard exists
            self.guard: FenceGuard = NO_FENCE

    owner = Owner()
    owner.written["job-1"] = "p50=10:10"
    assert owner.written["job-1"] == "p50=10:10"           # no lease: one term (None) for ever
    owner.guard = Term(2)                                   # use_fence: the lease's guard, token 2
    assert owner.written.get("job-1") is None
    owner.written.update({"job-1": "p50=10:30", "job-2": "p50=11:00"})
    for j in owner.written:                                 # a prune while iterating (Slurm's show_eta)
        if j != "job-2":
            del owner.written[j]
    assert dict(owner.written) == {"job-2": "p50=11:00"}
