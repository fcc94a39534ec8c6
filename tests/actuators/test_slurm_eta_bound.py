"""The start estimates a cycle writes into Slurm AdminComments are bounded (actuators.slurm.max_eta_writes), the
accounts in turn: the order (eta_writes_in_turn) and the carry-over across cycles (show_eta over a squeue that
prints a fixed queue, in a dry run: nothing is sent, each write is the action it records)."""

import logging

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.comments import eta_writes_in_turn
from daemon.config import SlurmActuatorConfig, TenantConfig

MADE = 1767607200.0


def test_the_accounts_take_turns_and_the_furthest_off_goes_first_within_one():
    want = {"1": (100.0, None, None), "2": (50.0, None, None), "3": (9000.0, None, None), "4": (10.0, None, None),
            "5": (None, None, None), "6": (20.0, None, None), "7": (30.0, None, None)}
    written = {"3": (100.0, None, None),      # moved 8900 s
               "4": (400.0, None, None),      # moved 390 s
               "5": (400.0, None, None),      # became unknown: as far off as never written
               "6": (20.0, 500.0, None)}      # its p90 became unknown
    account = {"1": "flood", "2": "flood", "3": "flood", "4": "flood", "5": "flood", "6": "other", "7": "other"}
    got = eta_writes_in_turn(list(want), want, written, account, 100)
    # flood's: never written (2 sooner than 1), then the unknown one (5: its p50 none, after the known ones), then
    # the most moved (3 before 4); other's: 6 and 7 both inf off, 6 sooner. other's first job (p50 20) goes first
    assert got == ["6", "2", "7", "1", "5", "3", "4"]
    assert eta_writes_in_turn(list(want), want, written, account, 3) == ["6", "2", "7"]
    assert eta_writes_in_turn([], want, written, account, 3) == []


def test_a_flood_of_one_account_leaves_each_other_account_its_turn():
    want = {str(i): (float(i), None, None) for i in range(1000, 1300)}
    account = dict.fromkeys(want, "flood")
    for k, acct in enumerate(("b", "c", "d")):
        for i in range(3):
            jid = str(2000 + 10 * k + i)
            want[jid], account[jid] = (5000.0 + i, None, None), acct
    got = eta_writes_in_turn(list(want), want, {}, account, 50)
    assert len(got) == 50 and sum(account[j] != "flood" for j in got) == 9
    assert [j for j in got if account[j] == "flood"] == [str(i) for i in range(1000, 1041)]   # soonest first


PENDING = "{id}|{acct}|low|normal|PENDING||0:00|gres/gpu:1|Resources|2026-12-06T02:00:00|(null)|1|N/A|UNLIMITED"


def actuator(tmp_path, lines, most):
    """A dry-run actuator whose squeue prints `lines` (nothing else is run in a dry run's show_eta)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "queue").write_text("\n".join(lines) + "\n")
    (bin_dir / "squeue").write_text(f"#!/bin/sh\ncat {tmp_path / 'queue'}\n")
    (bin_dir / "squeue").chmod(0o755)
    cfg = SlurmActuatorConfig(bin_dir=bin_dir, max_eta_writes=most)
    return SlurmActuator(cfg, [TenantConfig(name="flood", tier="low"), TenantConfig(name="other", tier="low")],
                         dry_run=True)


def written(rep):
    return [a.split()[2].removeprefix("JobId=") for a in rep.actions]


def test_the_jobs_not_written_in_a_cycle_are_written_in_the_next_each_once(tmp_path, caplog):
    flood = [str(100 + i) for i in range(10)]
    other = ["200", "201"]
    a = actuator(tmp_path, [PENDING.format(id=j, acct="flood") for j in flood]
                 + [PENDING.format(id=j, acct="other") for j in other], most=4)
    rows = [{"job_id": j, "p50_s": 600.0, "p90_s": None} for j in flood + other]
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.actuator.slurm"):
        cycles = [written(a.show_eta(rows, MADE)) for _ in range(5)]
    assert sorted(cycles[0]) == ["100", "101", "200", "201"]
    assert cycles[1] == flood[2:6] and cycles[2] == flood[6:] and cycles[3] == [] == cycles[4]
    cut = [r for r in caplog.records if "max_eta_writes" in r.getMessage()]
    assert [r.levelname for r in cut] == ["WARNING", "INFO"], [r.getMessage() for r in cut]   # once cut, once caught up
    assert "8 pending jobs' start estimates left" in cut[0].getMessage()
    rows[0]["p50_s"] = 6000.0      # moved: written again, alone
    assert written(a.show_eta(rows, MADE)) == ["100"]


def test_the_admin_comments_of_a_batch_are_read_as_they_come_not_every_jobs_json_held(tmp_path):
    """Slurm 22.05's squeue --json prints every job's record (~3 KB each) whatever -j names, and AdminComments held
    the text and its parsed objects whole to find a batch's few comments: each cycle that writes an estimate, beside
    a tenant's 10^5 pending jobs. Now each record is decoded as it comes and only the batch's comments kept; what the
    read holds beyond one of an empty queue stays a fraction of the text (4,000 records of 4 KB, tracemalloc: not a
    timing), and the site's comment is still kept beside ours."""
    import json
    import tracemalloc

    recs = [{"job_id": i, "admin_comment": "site: billing ok" if i == 5 else "", "command": "x" * 4000}
            for i in range(4000)]
    text = json.dumps({"meta": {}, "errors": [], "jobs": recs})
    (tmp_path / "jobs.json").write_text(text)
    (tmp_path / "empty.json").write_text('{"jobs": []}')

    def peak(listing: str) -> tuple[int, str]:
        bin_dir = tmp_path / f"bin-{listing}"
        bin_dir.mkdir()
        (bin_dir / "squeue").write_text(f"#!/bin/sh\ncat {tmp_path / listing}\n")
        (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {bin_dir / "sent"}\n')
        for b in ("squeue", "scontrol"):
            (bin_dir / b).chmod(0o755)
        a = SlurmActuator(SlurmActuatorConfig(bin_dir=bin_dir), [TenantConfig(name="t", tier="low")], dry_run=False)
        tracemalloc.start()
        try:
            rep = a.comment(["5"], "health: a note")
            got = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert rep.ok, rep.errors
        return got, (bin_dir / "sent").read_text().strip()

    extra, sent = peak("jobs.json")
    assert sent == "update JobId=5 AdminComment=site: billing ok | gpu-autoscaler: health: a note"
    extra -= peak("empty.json")[0]
    assert extra < len(text) / 4, (extra, len(text))
