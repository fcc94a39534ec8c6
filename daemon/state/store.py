"""State that must survive a restart, in SQLite: the policy's memory, the last good plan, the model in use.

Each save is one transaction (WAL, synchronous=FULL), so a kill -9 at any
moment leaves either the previous committed state or the new one, never a mix.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from daemon.policy.types import Plan, PolicyMemory

log = logging.getLogger("gpu_autoscaler.state")


class StateError(Exception):
    """The state file cannot be used at all (unreadable, not SQLite): the daemon does not start. One line naming
    the file and what to do; its contents are never overwritten."""


# What a start restores, how it is parsed, what it is called, and what the daemon does when the saved value is junk
# (a hand edit, another version's file, a bad sector): it keeps going without it, and says so naming the file.
RESTORED: dict[str, tuple[Callable[[Any], Any], str, str]] = {
    "memory": (lambda d: PolicyMemory.from_dict(d) if d else PolicyMemory(), "policy memory",
               "the daemon starts with a fresh one (hold ages, aging waits and the preemption budget start over)"),
    "last_plan": (lambda d: Plan.from_dict(d) if d else None, "last good plan",
                  "the daemon starts with none restored; its first cycle makes one"),
    "last_plan_made_at": (lambda v: None if v is None else float(v), "time the last good plan was made",
                          "the restored plan counts as too old to enforce until the first cycle makes one"),
}


def parse_saved(key: str, raw: str | None) -> tuple[Any, str | None]:
    """(the value, None), or (None, what is wrong and what the daemon does instead) for a saved value that is junk."""
    parse, what, instead = RESTORED[key]
    try:
        return parse(None if raw is None else json.loads(raw)), None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return None, f"the saved {what} ({key!r}) is unreadable ({type(exc).__name__}: {exc}); {instead}"


def check_state_path(path: Path | str) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a state file, read-only, for `check-config`: errors stop the daemon (a directory it
    cannot create or write, a file it cannot read or that is not SQLite), warnings are junk it would start without."""
    path = Path(path)
    where = f"state.path {path}"
    if path.exists() and not path.is_file():
        return [f"{where}: not a file"], []
    parent = path.resolve().parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return [f"{where}: {probe} is not a directory"], []
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "the directory" if probe == parent else f"{parent} cannot be created: its parent"
        return [f"{where}: {what} {probe} is not writable by this user (the store, its journal and the history "
                "store are written there)"], []
    if not path.exists():
        return [], []
    if not os.access(path, os.R_OK | os.W_OK):
        return [f"{where}: the file is not readable and writable by this user"], []
    try:
        db = connect_ro(path)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            rows = dict(db.execute("SELECT key, value FROM kv WHERE key IN (%s)" % ",".join("?" * len(RESTORED)),
                                   tuple(RESTORED)).fetchall()) if "kv" in tables else {}
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return [f"{where}: not the daemon's SQLite store ({exc}): move it aside to start with no saved state, or "
                "restore it from a backup"], []
    return [], [f"{where}: {why}" for key in RESTORED if (why := parse_saved(key, rows.get(key))[1])]

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plans (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, stale INTEGER NOT NULL,
                                  summary TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, kind TEXT NOT NULL,
                                   detail TEXT NOT NULL, logged REAL);
CREATE TABLE IF NOT EXISTS shadow (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, record TEXT NOT NULL,
                                   logged REAL NOT NULL);
"""


def pack(record: dict) -> bytes:
    """A shadow record as stored (SQLite, Redis): JSON (NaN where a figure is unknown), zlib-compressed."""
    return zlib.compress(json.dumps(record, allow_nan=True, separators=(",", ":")).encode(), 1)


def unpack(raw: bytes | str) -> dict:
    return json.loads(zlib.decompress(raw) if isinstance(raw, bytes) else raw)


def unpack_record(record_id: int | str, raw: Any) -> dict:
    """A stored shadow record with its id (``"id"``: the SQLite row id, or the Redis stream id), or, where the
    stored bytes are not one (not zlib, not JSON, not an object), ``{"id", "unreadable": why}``: the report skips
    it by its id (daemon/shadow/record.py problem) instead of failing on it."""
    try:
        rec = unpack(raw)
    except (zlib.error, ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {"id": record_id, "unreadable": f"not compressed JSON ({type(exc).__name__}: {str(exc)[:80]})"}
    if not isinstance(rec, dict):
        return {"id": record_id, "unreadable": f"not a record but a JSON {type(rec).__name__}"}
    rec["id"] = record_id
    return rec


def connect_ro(path: Path | str) -> sqlite3.Connection:
    """A read-only connection to an SQLite file, by a URI built with pathlib (a name with ``?``, ``#`` or ``%``
    is quoted, not read as the URI's query or fragment). Read-only: it never writes the running daemon's file
    (no schema creation, no journal-mode change) and works where the caller may only read it (an operator shell
    under the systemd sandbox). A WAL file whose -shm cannot be created (no daemon has it open, in a directory
    this caller cannot write) is opened immutable: nothing is writing it then."""
    uri = Path(path).resolve().as_uri()
    db = sqlite3.connect(uri + "?mode=ro", uri=True)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError:
        db.close()
        if os.access(Path(path).resolve().parent, os.W_OK):
            raise
        return sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True)


def add_column(db: sqlite3.Connection, table: str, column: str, decl: str) -> None:
    """Add `column` to `table` of a store made before it existed. Two processes may open one store at once (the
    daemon starting while `shadow-report` or a test reads it): both can find the column missing and the second
    ALTER then fails with "duplicate column name", which stopped the daemon at start ('not usable as the daemon's
    SQLite store'). The column being there is what was wanted: that error is success."""
    if column in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
        return
    try:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    except sqlite3.OperationalError as exc:
        if "duplicate column name" not in str(exc):
            raise


def read_shadow_records(path: Path | str, limit: int | None = None) -> list[dict]:
    """The newest `limit` shadow records (all when None) of the state store at `path`, oldest first, read-only."""
    q = "SELECT id, record FROM shadow ORDER BY id DESC" + (" LIMIT ?" if limit is not None else "")
    db = connect_ro(path)
    try:
        rows = db.execute(q, (limit,) if limit is not None else ()).fetchall()
    finally:
        db.close()
    return [unpack_record(r[0], r[1]) for r in reversed(rows)]


class StateStore:
    def __init__(self, path: Path | str, keep_plans: int = 2000, events_keep_s: float = 30 * 86400,
                 events_max_rows: int = 200_000, clock: Callable[[], float] = time.time,
                 shadow_keep_s: float = 7 * 86400, shadow_max_rows: int = 20_160) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keep_plans = keep_plans
        self.events_keep_s = events_keep_s
        self.events_max_rows = events_max_rows
        self.shadow_keep_s = shadow_keep_s
        self.shadow_max_rows = shadow_max_rows
        self.clock = clock
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            # retention needs the wall-clock time each event was written (`at` may be simulated time): a store
            # made before that column gets it
            add_column(self._db, "events", "logged", "REAL")
            self._db.execute("CREATE INDEX IF NOT EXISTS events_logged ON events(logged)")
        except sqlite3.DatabaseError as exc:
            raise StateError(f"state.path {self.path}: not usable as the daemon's SQLite store ({exc}); the daemon "
                             "does not start: move the file aside to start with no saved state, or restore it "
                             "from a backup") from None

    def _prune_events(self, cur: sqlite3.Cursor) -> None:
        """Retention: events older than events_keep_s (by write time) and beyond the newest events_max_rows go."""
        cur.execute("DELETE FROM events WHERE logged < ?", (self.clock() - self.events_keep_s,))
        cur.execute("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?", (self.events_max_rows,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction under the store's lock: BEGIN IMMEDIATE (the write lock taken up front, so a
        replica sharing the file waits at the start, not half-way), COMMIT when the block ends,
        ROLLBACK on any exception (incl. KeyboardInterrupt), which is raised again: a cycle's plan, memory and
        events are saved together or not at all."""
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back itself (disk full)
                    cur.execute("ROLLBACK")
                raise

    @staticmethod
    def _put_kv(cur: sqlite3.Cursor, key: str, text: str, updated: Any) -> None:
        """Insert or replace one key's value (JSON text), within the caller's transaction."""
        cur.execute("INSERT INTO kv(key, value, updated) VALUES(?,?,?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value, updated=excluded.updated",
                    (key, text, updated))

    def _get(self, key: str) -> Any | None:
        row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def save_cycle(self, plan: Plan, model: str, made_at: float | None = None) -> None:
        """Commit the plan, the memory it carries, the model in use and when (epoch s) as one transaction."""
        now = plan.at
        with self._transaction() as cur:
            for key, value in (("last_plan", plan.to_dict()), ("memory", plan.memory.to_dict()),
                               ("model", model), ("last_plan_made_at", made_at)):
                self._put_kv(cur, key, json.dumps(value, allow_nan=True), now)
            cur.execute("INSERT INTO plans(at, stale, summary) VALUES(?,?,?)",
                        (now, int(plan.stale), json.dumps(plan.summary())))
            cur.execute("DELETE FROM plans WHERE id <= (SELECT MAX(id) FROM plans) - ?", (self.keep_plans,))
            self._prune_events(cur)

    def log_event(self, at: str, kind: str, detail: dict) -> None:
        with self._lock:
            self._db.execute("INSERT INTO events(at, kind, detail, logged) VALUES(?,?,?,?)",
                             (at, kind, json.dumps(detail), self.clock()))

    def get_value(self, key: str) -> Any | None:
        with self._lock:
            return self._get(key)

    def put_value(self, key: str, value: Any, at: str, event: tuple[str, dict] | None = None) -> None:
        """Write one value and, in the same transaction, the event that records who changed it."""
        with self._transaction() as cur:
            self._put_kv(cur, key, json.dumps(value), at)
            if event is not None:
                cur.execute("INSERT INTO events(at, kind, detail, logged) VALUES(?,?,?,?)",
                            (at, event[0], json.dumps(event[1]), self.clock()))

    def log_events(self, at: str, items: list[tuple[str, dict]]) -> None:
        """Several events in one transaction (one fsync)."""
        if not items:
            return
        with self._transaction() as cur:
            now = self.clock()
            cur.executemany("INSERT INTO events(at, kind, detail, logged) VALUES(?,?,?,?)",
                            [(at, k, json.dumps(d), now) for k, d in items])

    def mirror_events(self, cursor_key: str, cursor: Any, items: list[tuple[str, str, dict]]) -> None:
        """Events copied from a store shared by several replicas (HA overrides), and how far the copy got
        (`cursor` under `cursor_key`), in one transaction: a crash in between neither copies one twice nor
        skips one."""
        with self._transaction() as cur:
            now = self.clock()
            cur.executemany("INSERT INTO events(at, kind, detail, logged) VALUES(?,?,?,?)",
                            [(at, k, json.dumps(d), now) for at, k, d in items])
            self._put_kv(cur, cursor_key, json.dumps(cursor), items[-1][0] if items else "")

    def events(self, kind: str | None = None) -> list[dict]:
        with self._lock:
            q = "SELECT at, kind, detail FROM events" + (" WHERE kind=?" if kind else "") + " ORDER BY id"
            rows = self._db.execute(q, (kind,) if kind else ()).fetchall()
        return [{"at": a, "kind": k, **json.loads(d)} for a, k, d in rows]

    def recent_events(self, limit: int = 100, kind: str | None = None, tenant: str | None = None,
                      before: int | None = None) -> list[dict]:
        """Newest first, with the row id; `tenant` keeps events whose detail names that tenant."""
        where, args = [], []
        if kind:
            where.append("kind=?")
            args.append(kind)
        if tenant:
            where.append("(json_extract(detail, '$.tenant') = ? OR EXISTS "
                         "(SELECT 1 FROM json_each(detail, '$.tenants') WHERE value = ?))")
            args += [tenant, tenant]
        if before is not None:
            where.append("id < ?")
            args.append(before)
        q = ("SELECT id, at, kind, detail FROM events" + (" WHERE " + " AND ".join(where) if where else "")
             + " ORDER BY id DESC LIMIT ?")
        with self._lock:
            rows = self._db.execute(q, (*args, limit)).fetchall()
        return [{"id": i, "at": a, "kind": k, **json.loads(d)} for i, a, k, d in rows]

    def plan_history(self, limit: int = 240) -> list[dict]:
        """Summaries of the last `limit` good plans, oldest first (the console's cluster chart)."""
        with self._lock:
            rows = self._db.execute("SELECT summary FROM plans ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [json.loads(r[0]) for r in reversed(rows)]

    def _restore(self, key: str) -> Any:
        """A saved value (RESTORED), or its stand-in when it is junk, with a warning naming this file."""
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        value, why = parse_saved(key, None if row is None else row[0])
        if why is not None:
            log.warning("state file %s: %s", self.path, why)
            value, _ = parse_saved(key, None)
        return value

    def load_plan(self) -> Plan | None:
        return self._restore("last_plan")

    def load_memory(self) -> PolicyMemory:
        return self._restore("memory")

    def load_plan_made_at(self) -> float | None:
        """Wall-clock time (epoch s) the restored plan was made; None for a plan saved without one."""
        return self._restore("last_plan_made_at")

    def save_shadow(self, record: dict) -> None:
        """One dry-run cycle's shadow record (daemon/shadow/record.py), compressed JSON; kept state.shadow_keep_days
        (by write time) and at most state.shadow_max_rows records."""
        with self._transaction() as cur:
            now = self.clock()
            cur.execute("INSERT INTO shadow(at, record, logged) VALUES(?,?,?)",
                        (str(record.get("at", "")), pack(record), now))
            cur.execute("DELETE FROM shadow WHERE logged < ?", (now - self.shadow_keep_s,))
            cur.execute("DELETE FROM shadow WHERE id <= (SELECT MAX(id) FROM shadow) - ?", (self.shadow_max_rows,))

    def shadow_records(self, limit: int | None = None) -> list[dict]:
        """The newest `limit` shadow records (all when None), oldest first."""
        # a connection of its own, read-only, not the store's lock: a large read (the console's report) must not
        # hold up the cycle's writes (save_cycle, log_events, save_shadow); WAL lets it read while they commit
        return read_shadow_records(self.path, limit)

    def plan_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM plans").fetchone()[0])
