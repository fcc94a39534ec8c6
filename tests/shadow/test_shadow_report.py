"""The shadow report (issue #27): dry-run decisions recorded each cycle, set against the demand seen afterwards."""

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from daemon.config import Config
from daemon.shadow.record import tenants
from daemon.shadow.report import shadow_report
from daemon.state.store import StateStore

ROOT = Path(__file__).resolve().parents[2]


def rec(k: int, tenants: dict, preemptions=(), horizon: int = 3) -> dict:
    at = pd.Timestamp("2026-01-01T00:00:00Z") + pd.Timedelta(minutes=k)
    return {"v": 1, "at": at.isoformat(), "cycle": k + 1, "seen_at": at.isoformat(), "step_s": 60,
            "horizon_steps": horizon, "lead_time_steps": 2, "quantile": 0.9, "model": "m", "capacity": 16,
            "load": 0.5, "rate_level": 0, "notes": [], "tenants": tenants, "preemptions": list(preemptions)}


def t(tier, seen, used=None, hold=0, fc_next=None, fc_peak=None, rate=100.0, rr=None, level=0):
    return {"tier": tier, "used": seen if used is None else used, "pending": 0, "seen": seen, "hold": hold,
            "quota": None, "rate": rate, "level": level, "limit_reason": "", "request_rate": rr,
            "fc_next": fc_next, "fc_peak": fc_peak}


def test_hand_computed_report():
    # the high tenant runs 2 GPUs; the decision at minute 0 holds 8 for it; demand seen then: 2, 6, 10, 4
    # waits avoided by the minute-0 hold: only minute 1 (the next decision at minute 1 takes over):
    # min(6 - 2, 8 - 2) = 4; the minute-1 decision (used 6, hold 8) covers minute 2: min(10 - 6, 2) = 2;
    # minute 2 (used 8, no hold) nothing. Coverage of the next step: fc_next 5 vs 6 (miss), 12 vs 10 (hit),
    # 4 vs 4 (hit); peak over 3 steps only for minute 0 (the only one whose horizon was seen): max(6,10,4)=10 <= 11
    hi = [t("high", 2, hold=8, fc_next=5, fc_peak=11), t("high", 6, hold=8, fc_next=12, fc_peak=12),
          t("high", 10, used=8, fc_next=4, fc_peak=20), t("high", 4, fc_next=4, fc_peak=4)]
    lo = [t("low", 8, rr=50, level=1), t("low", 8, rr=150), t("low", 8, rr=100), t("low", 8)]
    pre = {1: [{"job_id": "j1", "tenant": "lo", "gpus": 2, "node": "n1", "reason": "r", "for_tenant": "hi",
                "lost_gpu_min": 30.0}],
           2: [{"job_id": "j2", "tenant": "lo", "gpus": 4, "node": "n1", "reason": "r", "for_tenant": "hi",
                "lost_gpu_min": 12.5}]}
    records = [rec(k, {"hi": hi[k], "lo": lo[k]}, pre.get(k, ())) for k in range(4)]
    rep = shadow_report(records)
    h, lo_ = rep["tenants"]["hi"], rep["tenants"]["lo"]
    assert h["hold_cycles"] == 2 and h["waits_avoided_gpu_min"] == 4 + 2
    assert h["coverage_next"] == pytest.approx(2 / 3) and h["coverage_next_scored"] == 3
    assert h["coverage_peak"] == 1.0 and h["coverage_peak_scored"] == 1
    assert h["preemptions_for"] == 2 and h["preemptions"] == 0
    assert lo_["preemptions"] == 2 and lo_["preempted_gpus"] == 6 and lo_["work_lost_gpu_min"] == 42.5
    assert lo_["throttled_cycles"] == 1 and lo_["throttled_share"] == pytest.approx(1 / 3)  # 150 > 100; rr unknown once
    assert lo_["tightened_share"] == 0.25
    assert rep["tiers"]["high"]["waits_avoided_gpu_min"] == 6 and rep["tiers"]["low"]["preemptions"] == 2
    assert rep["preemptions"] == 2 and rep["hold_cycles"] == 2 and rep["cycles"] == 4
    # a tenant's view holds only its own rows
    only = shadow_report(records, tenant="lo")
    assert set(only["tenants"]) == {"lo"} and set(only["tiers"]) == {"low"}


def test_a_hold_for_a_peak_that_never_came_avoids_nothing():
    records = [rec(k, {"hi": t("high", 2, hold=8, fc_next=9, fc_peak=9)}) for k in range(5)]
    rep = shadow_report(records)
    assert rep["tenants"]["hi"]["hold_cycles"] == 5 and rep["tenants"]["hi"]["waits_avoided_gpu_min"] == 0


CONFIG = """
[actuators]
dry_run = {dry}
enabled = ["log", "simulator"]

[state]
path = "{state}"

[server]
enabled = false
"""


def daemon(tmp: Path, cycles: int, dry: bool = True) -> tuple[Path, str, str]:
    cfg = tmp / "c.toml"
    cfg.write_text(CONFIG.format(dry=str(dry).lower(), state=tmp / "state.sqlite"))
    p = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "run", "--cycles", str(cycles),
                        "--interval", "0.01"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return cfg, p.stdout, p.stderr


SUMMARY = re.compile(r"reserved=\d+ \((\d+) tenants\) preempt=(\d+)/(\d+)gpu")
DECISION = re.compile(r"decision: preempt (\d+) jobs?: (.*?)(?: and (\d+) more)?; ")
JOB = re.compile(r"(\S+) \((\S+), (\d+) GPUs?\)")


def test_shadow_report_of_a_dry_run_daemon_counts_the_decisions_the_log_shows(tmp_path):
    # the embedded simulator from 13:30 through its 14:00 peak: the plan preempts and holds; nothing is done
    cfg, out, err = daemon(tmp_path, 45)
    lines = [m.groups() for m in map(SUMMARY.search, out.splitlines()) if m]
    assert len(lines) == 45
    logged_pre = sum(int(p) for _, p, _ in lines)
    logged_gpus = sum(int(g) for _, _, g in lines)
    assert logged_pre > 0, "the case must preempt to test anything"
    # the log actuator's decision lines: the same total, and per tenant where no line was cut short
    dec = [m.groups() for m in map(DECISION.search, err.splitlines()) if m]
    assert sum(int(n) for n, _, _ in dec) == logged_pre
    per_tenant = Counter(j[1] for _, jobs, _ in dec for j in JOB.findall(jobs))
    cut = any(more for _, _, more in dec)
    rep = json.loads(subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report", "--json"],
                                    cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert rep["cycles"] == 45
    assert rep["preemptions"] == logged_pre
    assert sum(a["preempted_gpus"] for a in rep["tenants"].values()) == logged_gpus
    if not cut:
        assert {k: a["preemptions"] for k, a in rep["tenants"].items() if a["preemptions"]} == dict(per_tenant)
    store = StateStore(tmp_path / "state.sqlite")
    records = store.shadow_records()
    store.close()
    # holds: the tenants each cycle's plan held GPUs for, as the summary line counts them
    assert [sum(1 for d in tenants(r).values() if d["hold"] > 0) for r in records] == [int(k) for k, _, _ in lines]
    assert rep["hold_cycles"] == sum(int(k) for k, _, _ in lines)
    # each preemption says why, and what work it would have lost (the simulator's checkpoint interval)
    assert all(p["reason"] and p["lost_gpu_min"] >= 0 for r in records for p in r["preemptions"])
    assert rep["tiers"]["high"]["coverage_next_scored"] > 0
    text = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "tier high" in text and "tenant-0000" in text


def test_no_record_when_the_actuators_act_or_the_replica_stands_by(tmp_path):
    from daemon.service.wiring import build_runtime

    for dry, acting in ((False, True), (True, False), (True, True)):
        d = tmp_path / f"{dry}-{acting}"
        cfg = Config(actuators={"dry_run": dry, "enabled": ["log", "simulator"]}, state={"path": d / "s.sqlite"},
                     server={"enabled": False})
        rt = build_runtime(cfg)
        try:
            if not acting:
                rt.runner.may_act = lambda: False
            for _ in range(3):
                rt.runner.run_once()
            n = len(rt.runner.store.shadow_records())
        finally:
            rt.close()
        assert n == (3 if dry and acting else 0), (dry, acting)


def test_shadow_report_without_records_is_one_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(dry="true", state=tmp_path / "none.sqlite"))
    p = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "no state store" in p.stderr


def test_the_store_keeps_shadow_records_compressed_and_bounded(tmp_path):
    now = [1000.0]
    s = StateStore(tmp_path / "s.sqlite", clock=lambda: now[0], shadow_keep_s=3600, shadow_max_rows=5)
    try:
        for k in range(8):
            s.save_shadow(rec(k, {"hi": t("high", float("nan"), used=2, hold=8)}))
        got = s.shadow_records()
        assert [r["cycle"] for r in got] == [4, 5, 6, 7, 8]            # the newest max_rows, oldest first
        assert [r["cycle"] for r in s.shadow_records(2)] == [7, 8]
        assert got[0]["tenants"]["hi"]["seen"] != got[0]["tenants"]["hi"]["seen"]   # NaN (unknown) survives
        raw = s._db.execute("SELECT record FROM shadow LIMIT 1").fetchone()[0]
        assert isinstance(raw, bytes)                                    # stored compressed
        now[0] += 7200                                                   # two hours later: all older than keep_s
        s.save_shadow(rec(9, {"hi": t("high", 1.0)}))
        assert [r["cycle"] for r in s.shadow_records()] == [10]
    finally:
        s.close()


@pytest.mark.security
def test_reading_shadow_records_does_not_hold_the_store_lock(tmp_path):
    # the console's report reads many records: the read must not take the lock the cycle's writes need (nor wait
    # for it), so a large read never holds up save_cycle / log_events / save_shadow
    import threading

    s = StateStore(tmp_path / "s.sqlite")
    try:
        s.save_shadow(rec(0, {"hi": t("high", 1.0)}))
        got: list = []
        with s._lock:  # as if a writer held it (or as a writer would wait on a reader that held it)
            th = threading.Thread(target=lambda: got.append(s.shadow_records()), daemon=True)
            th.start()
            th.join(5)
            assert not th.is_alive(), "shadow_records waited for the store lock"
        assert [r["cycle"] for r in got[0]] == [1]
    finally:
        s.close()


def test_report_windows_are_the_same_with_repeated_and_unsorted_times():
    # the linear report (binary search, one backwards pass for the next decision) gives the figures the
    # hand-computed report gives whatever the records' order, and repeated seen_at take the newest cycle's demand
    hi = [t("high", 2, hold=8, fc_next=5, fc_peak=11), t("high", 6, hold=8, fc_next=12, fc_peak=12),
          t("high", 10, used=8, fc_next=4, fc_peak=20), t("high", 4, fc_next=4, fc_peak=4)]
    records = [rec(k, {"hi": hi[k]}) for k in range(4)]
    dup = {**rec(1, {"hi": t("high", 6, used=6, hold=0)}), "cycle": 0}  # an older cycle with the same seen_at
    rep = shadow_report(list(reversed(records)) + [dup])["tenants"]["hi"]
    assert rep["hold_cycles"] == 2 and rep["waits_avoided_gpu_min"] == 6 and rep["cycles"] == 5
    assert rep["coverage_next_scored"] == 3 and rep["coverage_next"] == pytest.approx(2 / 3)  # dup: no forecast


@pytest.mark.security
def test_a_replica_deposed_during_the_cycle_writes_no_record(tmp_path, monkeypatch):
    # the lease is checked again right before the write: a replica that led when the cycle began and lost the
    # lease since (paused, woken after a takeover) must not add a record for a period the new leader records
    import daemon.shadow.record as record
    from daemon.service.wiring import build_runtime

    cfg = Config(actuators={"dry_run": True, "enabled": ["log", "simulator"]}, state={"path": tmp_path / "s.sqlite"},
                 server={"enabled": False})
    made = []
    real = record.make_record

    def make(*args, **kwargs):  # the lease is lost while the second cycle's record is being made
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(record, "make_record", make)
    rt = build_runtime(cfg)
    try:
        rt.runner.may_act = lambda: len(made) < 2
        rt.runner.run_once()
        rt.runner.run_once()
        assert len(made) == 2 and rt.runner.acting  # the second cycle began as the leader and made its record
        assert [r["cycle"] for r in rt.runner.store.shadow_records()] == [1]
    finally:
        rt.close()


@pytest.mark.security
@pytest.mark.parametrize("daemon_running", [True, False])
def test_shadow_report_reads_the_store_read_only_as_a_user_who_may_only_read_it(daemon_running):
    # an operator shell that may read the daemon's state store but not write it (the systemd sandbox): the report
    # opens it read-only (the old code opened it read-write: PRAGMA journal_mode=WAL, CREATE TABLE, ...) and the
    # file is left as it was
    import hashlib
    import os
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the report as another user")
    d = Path(tempfile.mkdtemp(dir="/tmp", prefix="ro-store-"))
    try:
        d.chmod(0o755)
        s = StateStore(d / "state.sqlite")
        for k in range(3):
            s.save_shadow(rec(k, {"hi": t("high", 2.0, hold=4)}))
        if not daemon_running:
            s.close()  # a clean stop: no -wal / -shm beside the file, and the directory is not the user's
        cfg = d / "c.toml"
        cfg.write_text(CONFIG.format(dry="true", state=d / "state.sqlite"))
        cfg.chmod(0o644)
        before = hashlib.sha256((d / "state.sqlite").read_bytes()).hexdigest()
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                            "daemon.cli", "-c", str(cfg), "shadow-report", "--json"], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-1000:]
        assert json.loads(p.stdout)["cycles"] == 3
        assert hashlib.sha256((d / "state.sqlite").read_bytes()).hexdigest() == before
        if daemon_running:
            s.save_shadow(rec(3, {"hi": t("high", 2.0)}))  # the daemon goes on writing
            assert len(s.shadow_records()) == 4
            s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- issue 36: one corrupt record costs its own cycle, one line naming it, never the report ----------------

def _store_with_corrupt_records(path: Path) -> list[int]:
    """Six good records and three bad ones between them: bytes that are not compressed JSON, a record without
    its seen_at, and one whose column is shorter than its names. Returns the bad ones' row ids."""
    from daemon.state.store import pack

    s = StateStore(path)
    try:
        for k in range(3):
            s.save_shadow(rec(k, {"hi": t("high", 2 + k, hold=8, fc_next=5, fc_peak=9)}))
        now = 1e12
        columnar = {k: v for k, v in rec(4, {}).items() if k != "tenants"}
        bad = [b"\x00not zlib", pack({k: v for k, v in rec(3, {}).items() if k != "seen_at"}),
               pack({**columnar, "v": 2, "names": ["hi", "lo"], "cols": {"seen": [1.0], "used": [1.0]}})]
        ids = []
        with s._db:
            for raw in bad:
                ids.append(s._db.execute("INSERT INTO shadow(at, record, logged) VALUES(?,?,?)",
                                         ("x", raw, now)).lastrowid)
        for k in range(5, 8):
            s.save_shadow(rec(k, {"hi": t("high", 2 + k, hold=8, fc_next=5, fc_peak=9)}))
    finally:
        s.close()
    return ids


def test_shadow_report_skips_a_corrupt_record_with_one_line_naming_it(tmp_path):
    ids = _store_with_corrupt_records(tmp_path / "state.sqlite")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(dry="true", state=tmp_path / "state.sqlite"))
    p = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report", "--json"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 3
    for rid, line, why in zip(ids, lines, ("not compressed JSON", "no 'seen_at'", "'cols.")):
        assert f"shadow record {rid} skipped: {why}" in line, line
    rep = json.loads(p.stdout)
    assert rep["cycles"] == 6 and rep["skipped_records"] == 3
    assert [s["id"] for s in rep["skipped"]] == ids
    assert rep["tenants"]["hi"]["cycles"] == 6
    text = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report"], cwd=ROOT,
                          capture_output=True, text=True)
    assert text.returncode == 0 and "(3 corrupt records skipped)" in text.stdout


@pytest.mark.parametrize("bad", [
    {"seen_at": "not a time"}, {"seen_at": None}, {"step_s": "60"}, {"step_s": 0}, {"horizon_steps": -1},
    {"cycle": "x"}, {"tenants": [1, 2]}, {"tenants": {"hi": 3}},
    {"tenants": {"hi": {"tier": "high", "seen": "many", "used": 1}}},
    {"preemptions": [{"tenant": "hi"}]}, {"preemptions": [{"tenant": 3, "gpus": 1}]}, {"preemptions": "all"},
])
def test_a_record_of_the_wrong_shape_is_skipped_whole_by_its_position(bad):
    good = [rec(k, {"hi": t("high", 2 + k, hold=8, fc_next=5, fc_peak=9)}) for k in range(4)]
    want = shadow_report(good)
    broken = {**rec(9, {"hi": t("high", 50, hold=60)}), **bad}
    got = shadow_report([good[0], good[1], broken, good[2], good[3]])
    assert got["skipped_records"] == 1 and got["skipped"][0]["id"] == "#2"
    assert {k: v for k, v in got.items() if not k.startswith("skipped")} == \
        {k: v for k, v in want.items() if not k.startswith("skipped")}


def test_a_report_read_from_the_counts_is_the_report_computed_for_the_viewer():
    # the console counts once per cycle and reads every viewer's report from the counts (daemon/web/
    # shadow_reports.py): an operator's and each tenant token's report are the ones computed for them alone
    from daemon.shadow.report import count, view
    from tests.web.test_shadow_page import synthetic_records

    records = synthetic_records(300, tenants=12)
    tot = count(records)
    assert view(tot) == shadow_report(records)
    for k in range(12):
        name = f"tenant-{k:04d}"
        assert view(tot, name, private=True) == shadow_report(records, tenant=name, private=True)
        assert view(tot, name) == shadow_report(records, tenant=name)
    assert view(tot, "nobody", private=True) == shadow_report(records, tenant="nobody", private=True)


def test_shadow_report_on_a_store_with_no_record_says_a_source_down_records_nothing(tmp_path):
    """The README's minimal config started with its source down: every cycle was a dry run, yet the store holds no
    record, and the line gave only dry_run and shadow_records as the reasons (both were on). A cycle that read no
    fresh data (source down, stale data) records nothing: the line says so."""
    from click.testing import CliRunner

    from daemon.cli import cli

    StateStore(tmp_path / "s.sqlite").close()
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(dry="true", state=tmp_path / "s.sqlite"))
    r = CliRunner().invoke(cli, ["-c", str(cfg), "shadow-report"])
    assert r.exit_code == 1 and "holds no shadow record" in r.output, r.output
    assert "source" in r.output.split("holds no shadow record", 1)[1], r.output


def test_a_job_a_dry_run_picks_again_and_again_is_one_preemption_until_it_restarts():
    """First-day walk (hday3, Kubernetes in dry run): the plan picked the same low 8-GPU pod in two cycles (a dry run
    evicts nothing, so it stays), and shadow-report counted 2 preemptions and twice its lost work. A job counts once
    while it runs on; once preempted for real and started again (the simulator acts) it counts again."""
    def pre(job, runtime_s, lost):
        return {"job_id": job, "tenant": "lo", "gpus": 8, "node": "n1", "reason": "r", "for_tenant": "hi",
                "lost_gpu_min": lost, "runtime_s": runtime_s}

    tens = {"hi": t("high", 8, hold=16), "lo": t("low", 8)}
    # j1 running since 300 s before minute 0: picked at minutes 0, 1 and 2 (its runtime grows with the clock), then
    # restarted (runtime 30 s at minute 4) and picked again; j2 picked once
    pres = {0: [pre("j1", 300.0, 40.0)], 1: [pre("j1", 360.0, 48.0), pre("j2", 60.0, 8.0)],
            2: [pre("j1", 420.0, 56.0)], 4: [pre("j1", 30.0, 4.0)]}
    rep = shadow_report([rec(k, tens, pres.get(k, ())) for k in range(5)])
    lo, hi = rep["tenants"]["lo"], rep["tenants"]["hi"]
    assert (lo["preemptions"], lo["preempted_gpus"], lo["work_lost_gpu_min"]) == (3, 24, 40.0 + 8.0 + 4.0)
    assert hi["preemptions_for"] == 3 and rep["preemptions"] == 3
    # records written before the runtime was kept count each preemption, as they did
    old = {k: [{x: v for x, v in p.items() if x != "runtime_s"} for p in ps] for k, ps in pres.items()}
    assert shadow_report([rec(k, tens, old.get(k, ())) for k in range(5)])["preemptions"] == 5


def test_no_cycle_counts_as_throttled_where_no_gateway_would_apply_the_limits(tmp_path):
    """First-day walk (hday3, no Redis gateway): `shadow-report`'s "thrott" read 100% for every tenant, of limits
    nothing would have applied. A dry run without the redis actuator records that no gateway applies the limits;
    the report then counts nobody throttled ("-"), says why in one line, and keeps the plan's levels in the
    records. Records that say a gateway applies them (or older ones, which do not say) count as before."""
    cfg, out, _ = daemon(tmp_path, 3)   # the embedded simulator at 100% load: the rate level rises at once
    assert " level=2 " in out
    store = StateStore(tmp_path / "state.sqlite")
    records = store.shadow_records()
    store.close()
    assert [r["limits_enforced"] for r in records] == [False] * 3
    assert any(d["level"] for r in records for d in tenants(r).values())   # the plan's limits were tightened
    rep = json.loads(subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report", "--json"],
                                    cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert rep["unenforced_cycles"] == 3
    assert {a["tightened_share"] for a in [*rep["tenants"].values(), *rep["tiers"].values()]} == {None}
    text = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "no gateway would have applied them in 3 of these cycles" in text
    row = next(x for x in text.splitlines() if x.startswith("tier low"))
    assert row.split()[9] == "-", row   # thrott
    # with a gateway (the redis actuator) the same limits throttle; a record from before the field counts as then
    gw = [{**r, "limits_enforced": True} for r in records]
    old = [{k: v for k, v in r.items() if k != "limits_enforced"} for r in records]
    for rs in (gw, old):
        got = shadow_report(rs)
        assert got["unenforced_cycles"] == 0 and got["tiers"]["low"]["tightened_share"] == 1.0
