"""The console's "What it would have done": the shadow report counted once per cycle, in a worker of its own.

Reading the records is what costs (2,000 tenants x 1,440 records: seconds of decompressing and parsing), and it
is the same work for every viewer of one cycle. So the records are read and counted (daemon/shadow/report.py
`count`) once per cycle and window, on the first request after the cycle, and every viewer's report is read
from those counts (`view`: an operator's whole report, a tenant token's own rows), which costs microseconds.
Concurrent requests for the same cycle wait on the one count.

The counting runs in this module's own thread pool (one worker), never in the default one that the operator's
writes (PATCH of overrides, the console's forms: `run_in_threadpool`) use: however many tenants load the page,
an operator's pause never queues behind them. The pool lives only while a count is queued or running: an idle
worker kept for the process's life was a thread every app built in a test left behind (helper hleak's leak check),
and a fork from such a process copies it; nothing shuts the app's pool down otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from daemon.shadow.report import Totals, count, view

log = logging.getLogger("gpu_autoscaler.http")

KEEP = 4               # windows (?cycles=) of the current cycle kept counted
LOGGED_IDS_MAX = 10_000  # corrupt record ids already logged (a bound: a stream of them must not grow memory)


class ShadowReports:
    """Counts of the newest `limit` shadow records, one per (cycle, limit), shared by every request."""

    def __init__(self, read: Callable[[int], list[dict]], workers: int = 1) -> None:
        self._read = read
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None   # while a count is queued or running (module docstring)
        self._queued = 0
        self._lock = threading.Lock()
        self._counts: OrderedDict[tuple[int, int], Future] = OrderedDict()
        self._logged: OrderedDict[object, None] = OrderedDict()
        self.counted = 0   # how many times records were read and counted (once per cycle and window)

    def totals(self, cycle: int, limit: int) -> Future:
        """The counts of the newest `limit` records as of `cycle` (a Future: the count may still run)."""
        key = (cycle, limit)
        with self._lock:
            f = self._counts.get(key)
            if f is not None and not (f.done() and f.exception() is not None):  # a failed read is tried again
                self._counts.move_to_end(key)
                return f
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="shadow-report")
            self._queued += 1
            f = self._pool.submit(self._count, limit)
            self._counts[key] = f
            for k in [k for k in self._counts if k[0] != cycle]:  # a newer cycle: the older counts are out of date
                del self._counts[k]
            while len(self._counts) > KEEP:
                self._counts.popitem(last=False)
            return f

    def _count(self, limit: int) -> Totals:
        try:
            tot = count(self._read(limit))
        finally:
            with self._lock:
                self._queued -= 1
                if self._queued == 0 and self._pool is not None:
                    self._pool.shutdown(wait=False)   # its worker ends after this count; the next one makes a pool
                    self._pool = None
        with self._lock:
            self.counted += 1
            for s in tot.skipped:
                if s["id"] not in self._logged:
                    log.warning("shadow record %s skipped: %s", s["id"], s["problem"])
                    self._logged[s["id"]] = None
                    if len(self._logged) > LOGGED_IDS_MAX:
                        self._logged.popitem(last=False)
        return tot

    async def report(self, cycle: int, limit: int, tenant: str | None = None, private: bool = False) -> dict:
        """The report of the newest `limit` records as `tenant` (None: the operator) reads it."""
        tot = await asyncio.wrap_future(self.totals(cycle, limit))
        return view(tot, tenant, private)
