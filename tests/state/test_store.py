"""The state file at start: junk in a saved value is named with the file, and the daemon keeps going without it;
a file that is not the daemon's SQLite store stops the start with one line naming it (issue 36)."""

import json
import sqlite3

import pytest

from daemon.config import Config
from daemon.policy.types import PolicyMemory
from daemon.service.wiring import build_runtime
from daemon.state.store import StateError, StateStore, check_state_path


def junk_store(path, **values):
    StateStore(path).close()
    with sqlite3.connect(path) as db:
        for key, raw in values.items():
            db.execute("INSERT INTO kv(key, value, updated) VALUES(?,?,?)", (key, raw, "2026-01-01T00:00:00Z"))


@pytest.mark.parametrize("key, raw, what, instead", [
    ("memory", json.dumps({"reservations": {"a": "lots"}}), "policy memory", "starts with a fresh one"),
    ("memory", "{not json", "policy memory", "starts with a fresh one"),
    ("memory", "5", "policy memory", "starts with a fresh one"),
    ("last_plan", json.dumps({"at": "x"}), "last good plan", "starts with none restored"),
])
def test_junk_in_the_saved_state_is_named_and_the_daemon_starts_without_it(tmp_path, caplog, key, raw, what,
                                                                           instead):
    # it was "invalid literal for int() with base 10: 'lots'" out of build_runtime, naming no file
    path = tmp_path / "state.sqlite"
    junk_store(path, **{key: raw})
    cfg = Config(state={"path": path}, forecaster={"model_dir": tmp_path / "none", "kind": "none"},
                 cluster={"gpus": 64},
                 source={"simulator": {"tenants": 4, "warmup_steps": 120}})
    with caplog.at_level("WARNING", logger="gpu_autoscaler.state"):
        rt = build_runtime(cfg)
    try:
        assert rt.runner.memory == PolicyMemory() and rt.runner.last_plan is None
        [msg] = [r.getMessage() for r in caplog.records if r.name == "gpu_autoscaler.state"]
        assert msg.startswith(f"state file {path}: the saved {what} ({key!r}) is unreadable (") and instead in msg
        assert rt.runner.run_once().plan is not None       # and it keeps going: the next cycle plans and saves
    finally:
        rt.close()
    errors, warnings = check_state_path(path)
    assert errors == [] and warnings == []                  # the cycle's save replaced the junk


def test_check_config_reads_the_state_file_as_the_daemon_would(tmp_path):
    path = tmp_path / "state.sqlite"
    junk_store(path, memory='{"rate_level": "high"}', last_plan_made_at='"yesterday"')
    errors, warnings = check_state_path(path)
    assert errors == [] and len(warnings) == 2
    assert warnings[0].startswith(f"state.path {path}: the saved policy memory ('memory') is unreadable (ValueError")
    assert "the saved time the last good plan was made ('last_plan_made_at') is unreadable" in warnings[1]
    assert StateStore(path).load_plan_made_at() is None
    assert check_state_path(tmp_path / "new" / "deeper" / "state.sqlite") == ([], [])   # created at start
    (tmp_path / "file").write_text("x")
    assert check_state_path(tmp_path / "file" / "state.sqlite")[0] == [
        f"state.path {tmp_path / 'file' / 'state.sqlite'}: {tmp_path / 'file'} is not a directory"]
    assert check_state_path(tmp_path)[0] == [f"state.path {tmp_path}: not a file"]


def test_a_file_that_is_not_sqlite_stops_the_start_naming_it(tmp_path):
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not a database, just some text long enough to have a header" * 10)
    with pytest.raises(StateError, match=rf"state.path {path}: not usable as the daemon's SQLite store \(file is not a "
                                         "database\\); the daemon does not start: move the file aside"):
        StateStore(path)
    assert path.read_bytes().startswith(b"this is not")     # never overwritten


def test_a_store_opened_by_two_processes_at_once_is_not_refused_over_the_events_column(tmp_path):
    """The daemon starting while another process opened the same fresh store (CI: a test polling the store of a
    `run --sim` it started) failed at start with 'not usable as the daemon's SQLite store (duplicate column name:
    logged)': both found events.logged missing and both added it. A fresh store now has it from its schema, and a
    store made before it gets it once, the other opener's ALTER failing as 'duplicate column' read as done."""
    import sqlite3

    from daemon.state.store import SCHEMA, StateStore, add_column

    fresh = sqlite3.connect(tmp_path / "fresh.sqlite")
    fresh.executescript(SCHEMA)
    assert "logged" in {r[1] for r in fresh.execute("PRAGMA table_info(events)")}   # no ALTER on a fresh store
    fresh.close()
    old = sqlite3.connect(tmp_path / "old.sqlite")
    old.execute("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, kind TEXT NOT NULL, "
                "detail TEXT NOT NULL)")
    old.commit()

    class Stale:
        """A connection whose look at the columns came before the other opener's ALTER."""
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *a):
            return iter(()) if sql.startswith("PRAGMA table_info") else self.db.execute(sql, *a)

    add_column(old, "events", "logged", "REAL")            # the first opener migrates
    add_column(Stale(old), "events", "logged", "REAL")     # the second, a step behind: no error
    assert [r[1] for r in old.execute("PRAGMA table_info(events)")].count("logged") == 1
    old.close()
    s = StateStore(tmp_path / "old.sqlite")                # and the daemon opens it
    s.close()
