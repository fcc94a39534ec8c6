"""Rolling per-tenant demand history: held in memory, persisted in SQLite, read from the source incrementally.

The first update after a start backfills the whole window once, in chunks of ``chunk_steps``. Every
later update asks the source only for the steps that are new since the last read plus ``overlap_steps``
already-read steps again (late samples land there). After a restart the rows on disk are loaded and
only the steps missed while the daemon was down are read. A step the source had no data for stays NaN
(a gap is a gap); the window slides, older rows are dropped from memory and from disk.

On disk: one SQLite row per step (a float32 blob, one value per tenant in column order) and a tenants
table that only grows, so a row written before a tenant appeared is shorter and reads as NaN there.
A tenant that is not configured and held no GPU over the whole window is forgotten (checked every
PRUNE_EVERY_STEPS steps), so namespaces that come and go do not grow the history without bound.
The console reads it through ``read()`` / ``tenants()`` (a copy, under the same lock as updates).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.history")

# fetch(start_s, end_s, tenants) -> frame on the step grid from start_s to end_s inclusive, one column per
# tenant (at least `tenants`), NaN where the source has no data.
Fetch = Callable[[float, float, Sequence[str]], pd.DataFrame]

PRUNE_EVERY_STEPS = 60   # look for tenants to forget this often (a scan of the whole window)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (col INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS steps (step INTEGER PRIMARY KEY, vals BLOB NOT NULL);
"""


@dataclass(frozen=True)
class UpdateStats:
    first_step: int     # first step (unix seconds // step_s) read from the source this update
    steps_read: int     # steps read (new + overlap), 0 when nothing was due
    requests: int       # fetch calls (chunks)
    backfill: bool      # the window was (re)filled from scratch


class History:
    def __init__(self, step_s: int, steps: int, path: Path | str | None = None, *, overlap_steps: int = 1,
                 chunk_steps: int = 720, series: str = "plain") -> None:
        if overlap_steps < 1:
            raise ValueError("overlap_steps must be >= 1 (the last step is read again)")
        self.step_s = int(step_s)
        self.steps = int(steps)
        self.overlap = int(overlap_steps)
        self.chunk = int(chunk_steps)
        # what a column is: "plain" (a tenant) or "typed" (tenant@type, a mixed fleet's); a file written under the
        # other kind is started over, so switching [fleet] types on or off leaves no columns that are never read
        self.series = series
        self._lock = threading.RLock()
        self._empty()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._open(p)
            except (sqlite3.DatabaseError, ValueError, MemoryError) as exc:
                # a cache of the source's history: a file that cannot be read is set aside (nothing deleted) and
                # the history read again from the source, said in one line; it used to stop the daemon's start
                if self._db is not None:
                    self._db.close()
                aside = p.with_name(f"{p.name}.unreadable-{int(time.time())}")
                p.replace(aside)
                for extra in ("-wal", "-shm"):
                    Path(f"{p}{extra}").unlink(missing_ok=True)
                log.warning("history on disk (%s) cannot be read (%s: %s): moved to %s, starting over from the "
                            "source", p, type(exc).__name__, str(exc)[:200], aside.name)
                self._empty()   # whatever _load read before it failed
                self._open(p)

    def _empty(self) -> None:
        """No history: no tenant, no step, nothing read from the source yet."""
        self._names: list[str] = []
        self._saved_names = 0                    # names[:_saved_names] are in the tenants table
        self._col: dict[str, int] = {}
        self._vals = np.full((0, 0), np.nan)     # rows [_off, _off + _n) hold steps _first .. _first + _n - 1
        self._off = 0
        self._n = 0
        self._first = 0
        self.fetched_until: int | None = None   # last step read from the source

    def _open(self, p: Path) -> None:
        self._db = sqlite3.connect(p, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._load()

    # ---- persistence ------------------------------------------------------------------------
    def _load(self) -> None:
        db = self._db
        assert db is not None
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("step_s") not in (None, str(self.step_s)):
            log.warning("history on disk has step %ss, not %ss: starting over", meta["step_s"], self.step_s)
            db.executescript("DELETE FROM steps; DELETE FROM tenants; DELETE FROM meta;")
            meta = {}
        if meta and meta.get("series", "plain") != self.series:
            log.warning("history on disk has %s series, not %s ([fleet] types changed): starting over",
                        meta.get("series", "plain"), self.series)
            db.executescript("DELETE FROM steps; DELETE FROM tenants; DELETE FROM meta;")
            meta = {}
        names = [n for _, n in db.execute("SELECT col, name FROM tenants ORDER BY col")]
        self._names = names
        self._saved_names = len(names)
        self._col = {n: i for i, n in enumerate(names)}
        if "fetched_until" not in meta:
            return
        # only the window up to the last step read (a step far off it, written by no version, made the array
        # from it to the last row: terabytes); a row wider than the names, or not float32s, is a ValueError
        until = int(meta["fetched_until"])
        rows = db.execute("SELECT step, vals FROM steps WHERE step BETWEEN ? AND ? ORDER BY step",
                          (until - self.steps + 1, until)).fetchall()
        if not rows:
            return
        first, last = rows[0][0], rows[-1][0]
        vals = np.full((last - first + 1 + self._slack(), len(names)), np.nan)
        for step, blob in rows:
            v = np.frombuffer(blob, dtype=np.float32)
            if len(v) > len(names):
                raise ValueError(f"step {step} holds {len(v)} values for {len(names)} tenants")
            vals[step - first, :len(v)] = v
        self._vals, self._first, self._n, self._off = vals, first, last - first + 1, 0
        self.fetched_until = int(meta["fetched_until"])
        log.info("history: %s x %s loaded from disk, read up to %s", plural(self._n, "step"),
                 plural(len(names), "tenant"), pd.Timestamp(self.fetched_until * self.step_s, unit="s", tz="UTC"))

    def _persist(self, lo: int, hi: int, keep_from: int) -> None:
        if self._db is None:
            return
        db = self._db
        rows = [(s, self._vals[self._off + s - self._first].astype(np.float32).tobytes()) for s in range(lo, hi + 1)]
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO tenants(col, name) VALUES(?, ?)",
                           [(i, n) for i, n in enumerate(self._names) if i >= self._saved_names])
            db.executemany("INSERT OR REPLACE INTO steps(step, vals) VALUES(?, ?)", rows)
            db.execute("DELETE FROM steps WHERE step < ?", (keep_from,))
            db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                           [("step_s", str(self.step_s)), ("fetched_until", str(hi))]
                           + ([("series", self.series)] if self.series != "plain" else []))
            db.execute("COMMIT")
        except Exception:
            db.execute("ROLLBACK")
            raise
        self._saved_names = len(self._names)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # ---- in memory --------------------------------------------------------------------------
    def _slack(self) -> int:
        return max(16, self.steps // 4)

    def _ensure(self, names: Iterable[str]) -> list[str]:
        new = [n for n in names if n not in self._col]
        for n in new:
            self._col[n] = len(self._names)
            self._names.append(n)
        if self._vals.shape[1] < len(self._names):
            extra = np.full((self._vals.shape[0], len(self._names) - self._vals.shape[1]), np.nan)
            self._vals = np.hstack([self._vals, extra])
        return new

    def _place(self, lo: int, hi: int) -> None:
        """Make rows for steps lo..hi exist (NaN until written), dropping rows before hi - steps + 1.

        Rows live in _vals[_off : _off + _n]; sliding only moves _off, and when the array is full the
        window is copied into a new one, so a cycle costs no copy of the whole window.
        """
        keep_from = hi - self.steps + 1
        if self._n == 0 or lo < self._first or keep_from >= self._first + self._n:
            self._vals = np.full((self.steps + self._slack(), len(self._names)), np.nan)
            self._first, self._n, self._off = max(lo, keep_from), 0, 0
        if keep_from > self._first:
            drop = keep_from - self._first
            self._off, self._first, self._n = self._off + drop, keep_from, self._n - drop
        need = hi - self._first + 1
        if self._off + need > self._vals.shape[0]:
            fresh = np.full((max(need, self.steps) + self._slack(), len(self._names)), np.nan)
            fresh[: self._n] = self._vals[self._off: self._off + self._n]
            self._vals, self._off = fresh, 0
        if need > self._n:
            self._vals[self._off + self._n: self._off + need] = np.nan
            self._n = need

    def update(self, fetch: Fetch, now_s: float, tenants: Sequence[str] = ()) -> UpdateStats:
        """Read what is due from the source (backfill, the missed steps, or new steps + overlap)."""
        with self._lock:
            now = int(now_s // self.step_s)
            first_wanted = now - self.steps + 1
            if self._n and self._first + self._n - 1 > now:
                # the clock went back: rows after `now` were read under the wrong time, drop them
                log.warning("history: clock went back %d steps; dropping the rows after it",
                            self._first + self._n - 1 - now)
                self._n = max(0, now - self._first + 1)
                self.fetched_until = min(self.fetched_until, now) if self.fetched_until is not None else None
                if self._db is not None:
                    self._db.execute("DELETE FROM steps WHERE step > ?", (now,))
            backfill = (self.fetched_until is None or self.fetched_until < first_wanted
                        or self._n == 0 or self._first > first_wanted)
            lo = first_wanted if backfill else min(self.fetched_until, now) - self.overlap + 1
            lo = max(lo, first_wanted)
            self._ensure(tenants)
            requests = 0
            persist_lo = lo
            for c_lo in range(lo, now + 1, self.chunk):
                c_hi = min(now, c_lo + self.chunk - 1)
                frame = fetch(c_lo * self.step_s, c_hi * self.step_s, list(self._names))
                requests += 1
                new = self._ensure(frame.columns)
                if new and self.series == "typed" and self._n:
                    persist_lo = min(persist_lo, self._zero_fill(new))
                self._place(c_lo, c_hi)
                steps = pd.DatetimeIndex(frame.index).as_unit("s").asi8 // self.step_s
                ok = (steps >= self._first) & (steps < self._first + self._n)
                rows = self._off + (steps[ok] - self._first)
                cols = np.array([self._col[n] for n in frame.columns], dtype=np.int64)
                self._vals[rows, :] = np.nan          # a re-read row is replaced whole, gaps included
                self._vals[np.ix_(rows, cols)] = frame.to_numpy(dtype=float)[ok]
                del frame   # in the window now: a chunk's frame is not held while the next one is read
            self._persist(max(persist_lo, first_wanted), now, first_wanted)
            self.fetched_until = now
            if backfill or now % PRUNE_EVERY_STEPS == 0:
                self._prune(set(tenants))
            if backfill:
                log.info("history: backfilled %s x %s in %s%s", plural(now - lo + 1, "step"),
                         plural(len(self._names), "tenant"), plural(requests, "request"), self._first_sample(lo, now))
            return UpdateStats(lo, now - lo + 1, requests, backfill)

    def _first_sample(self, lo: int, now: int) -> str:
        """Where the source's samples begin in a backfilled window, when later than the window: on a Prometheus that
        began scraping an hour ago "backfilled 11520 steps" alone read as 8 days of demand read."""
        rows = self._vals[self._off + max(0, lo - self._first): self._off + self._n]
        seen = np.flatnonzero(np.isfinite(rows).any(axis=1))
        if not len(seen):
            return "; the source has no sample in it"
        if seen[0] == 0:
            return ""
        first = max(lo, self._first) + int(seen[0])
        at = pd.Timestamp(first * self.step_s, unit="s", tz="UTC").isoformat()
        return f"; the source's samples start at {at}: the last {plural(now - first + 1, 'step')}"

    def _zero_fill(self, new: list[str]) -> int:
        """Typed series (tenant@type) are sparse: the source sends a (tenant, type) only once it has GPUs there, so
        before that it held none of that type: 0 at every step already read that was scraped (any series has a
        value there), not a gap. Returns the first step so changed (to be written to disk again)."""
        rows = self._vals[self._off: self._off + self._n]
        old = [self._col[n] for n in self._names if n not in set(new)]
        scraped = np.isfinite(rows[:, old]).any(axis=1) if old else np.zeros(self._n, dtype=bool)
        cols = [self._col[n] for n in new]
        rows[np.ix_(np.flatnonzero(scraped), cols)] = 0.0
        return self._first

    def _prune(self, keep: set[str]) -> None:
        """Forget tenants that held no GPU over the whole window and are not configured (namespaces come
        and go). Done when at least a tenth of the columns can go, since it rewrites the file."""
        if self._n < self.steps or not self._names:
            return
        vals = self._vals[self._off: self._off + self._n, : len(self._names)]
        idle = ~(np.nan_to_num(vals) > 0).any(axis=0)
        drop = {j for j in np.flatnonzero(idle) if self._names[j] not in keep}
        if len(drop) < max(1, len(self._names) // 10):
            return
        cols = [j for j in range(len(self._names)) if j not in drop]
        log.info("history: forgetting %s idle for the whole window", plural(len(drop), "tenant"))
        self._names = [self._names[j] for j in cols]
        self._col = {n: i for i, n in enumerate(self._names)}
        self._vals = self._vals[:, cols]
        if self._db is not None:
            db = self._db
            rows = [(self._first + i, self._vals[self._off + i].astype(np.float32).tobytes()) for i in range(self._n)]
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM tenants")
                db.executemany("INSERT INTO tenants(col, name) VALUES(?, ?)", list(enumerate(self._names)))
                db.execute("DELETE FROM steps")
                db.executemany("INSERT INTO steps(step, vals) VALUES(?, ?)", rows)
                db.execute("COMMIT")
            except Exception:
                db.execute("ROLLBACK")
                raise
            self._saved_names = len(self._names)

    # ---- reading ----------------------------------------------------------------------------
    def tenants(self) -> list[str]:
        with self._lock:
            return list(self._names)

    def frame(self, steps: int | None = None, copy: bool = False) -> pd.DataFrame:
        """The newest ``steps`` rows (default: the whole window) as a time x tenant frame.

        Without ``copy`` the frame is a read-only view of the history (no copy of the window each cycle;
        writing into it raises instead of changing the history). The next update may still refresh the
        overlap rows under it (late samples).
        """
        with self._lock:
            n = self._n if steps is None else min(int(steps), self._n)
            vals = self._vals[self._off + self._n - n: self._off + self._n, : len(self._names)]
            if not copy:
                vals = vals.view()
                vals.flags.writeable = False
            idx = pd.date_range(pd.Timestamp((self._first + self._n - n) * self.step_s, unit="s", tz="UTC"),
                                periods=n, freq=f"{self.step_s}s", name="time")
            return pd.DataFrame(vals.copy() if copy else vals, index=idx,
                                columns=pd.Index(list(self._names), name="tenant"), copy=False)

    def read(self, tenants: Sequence[str] | None = None, start: pd.Timestamp | None = None,
             end: pd.Timestamp | None = None) -> pd.DataFrame:
        """For the console and API: a copy of some tenants between start and end (inclusive); NaN = gap."""
        f = self.frame(copy=False)
        if tenants is not None:
            f = f.reindex(columns=list(tenants))
        return f.loc[start:end].copy()
