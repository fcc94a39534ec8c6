"""Tests that leave threads running after they end: a teardown error, and (``--thread-leaks``) a report of every one.

A pytest worker carries the threads of every test it ran: at the end of a CI run a Kubernetes view was still
"retrying with backoff" against a control plane that had stopped (a test never stopped the view its actuator's
first read had started), and a fork from such a worker once hung 300 s. Loaded with
``pytest -p tests.support.thread_leaks`` (docs/testing.md, "Threads a test leaves running"):

- the check: when a module's last test has been torn down (its module-scoped fixtures with it), a thread started
  during the module that is still running a second later (GRACE_S) and is non-daemon or of a kind the daemon starts
  (KINDS: the Kubernetes view's watches, the leader lease, the HTTP server, the cycle loop, APScheduler, the pools)
  is that last test's teardown error, naming the test it was started in and what it is doing. Costs a
  ``threading.enumerate()`` per test, and the grace only where such a thread is still there.
- the report, ``--thread-leaks``: after the run, every thread any test (or a module- or session-scoped fixture it
  was the first to use) left running after its own teardown, of any kind, with its innermost frames; then those
  still alive at the end, and the time the check took.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

import pytest

GRACE_S = 1.0   # a thread told to stop by a teardown (a join with a timeout elsewhere) gets this long to end
KINDS = ("k8s-watch-", "leader-lease", "http", "cycles", "APScheduler", "failover", "shadow-report",
         "forecast-prefetch", "window-proposals")


def _alive() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


def describe(t: threading.Thread) -> str:
    """The thread's name, daemon flag and its innermost frames in this project or a library (not the stdlib's)."""
    frame = sys._current_frames().get(t.ident or -1)
    where = ""
    if frame is not None:
        stack = traceback.extract_stack(frame)
        own = [f for f in stack if "/daemon/" in f.filename or "/tests/" in f.filename or "site-packages" in f.filename]
        where = " <- ".join(f"{f.filename.rsplit('/', 2)[-2]}/{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
                            for f in reversed((own or stack)[-3:]))
    return f"{t.name}{' (daemon)' if t.daemon else ''}: {where}"


def checked(t: threading.Thread) -> bool:
    """Whether a thread left running fails the check: non-daemon (it holds the interpreter's exit) or one the
    daemon's code starts (KINDS)."""
    return not t.daemon or t.name.startswith(KINDS)


def _lingering(threads: set[threading.Thread], grace_s: float) -> list[threading.Thread]:
    """Those of `threads` still alive after up to `grace_s` (polled: no wait when none is)."""
    deadline = time.monotonic() + grace_s
    left = [t for t in threads if t.is_alive()]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [t for t in left if t.is_alive()]
    return sorted(left, key=lambda t: t.name)


class ThreadLeaks:
    def __init__(self, report: bool) -> None:
        self.report = report
        self.module_before: set[threading.Thread] | None = None   # alive when the module's first test began
        self.before: set[threading.Thread] = set()                 # alive when this test began
        self.started_by: dict[threading.Thread, str] = {}   # thread -> the test during which it started
        self.lines: list[str] = []
        self.spent = 0.0   # seconds the check itself took (the report says it)
        self.tests = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        t0 = time.perf_counter()
        if self.module_before is None:
            self.module_before = _alive()
        self.before = _alive()
        self.tests += 1
        self.spent += time.perf_counter() - t0
        yield
        if self.report:
            for t in _lingering(_alive() - self.before, GRACE_S):
                self.lines.append(f"{item.nodeid}: {describe(t)}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        """After the module's last test's teardown (nextitem in another module, or none): its threads are gone."""
        result = yield
        t0 = time.perf_counter()
        try:
            for t in _alive() - self.before:
                self.started_by.setdefault(t, item.nodeid)
            if nextitem is not None and nextitem.module is item.module:
                return result
            before, self.module_before = self.module_before or set(), None
            left = _lingering({t for t in _alive() - before if checked(t)}, GRACE_S)
        finally:
            self.spent += time.perf_counter() - t0
        if left:
            pytest.fail(f"{len(left)} thread(s) started in {item.module.__name__} still running after its tests and "
                        "fixtures ended (stop what a test starts: a view's stop(), a runtime's close(), a daemon's "
                        "stop()): " + "; ".join(f"{describe(t)} [started in {self.started_by.get(t, '?')}]"
                                                for t in left), pytrace=False)
        return result

    def pytest_terminal_summary(self, terminalreporter):
        if not self.report:
            return
        tr = terminalreporter
        tr.section("threads left running by a test (started during it, alive after its teardown)")
        for line in self.lines:
            tr.write_line(line)
        still = [t for t in self.started_by if t.is_alive()]
        tr.section(f"{len(still)} threads started by the tests still alive at the end of the session")
        for t in still:
            tr.write_line(f"{self.started_by[t]}: {describe(t)}")
        tr.write_line(f"the check took {self.spent:.3f} s over {self.tests} tests")


def pytest_addoption(parser):
    parser.addoption("--thread-leaks", action="store_true",
                     help="report every thread a test leaves running after its teardown "
                     "(tests/support/thread_leaks.py)")


def pytest_configure(config):
    config.pluginmanager.register(ThreadLeaks(config.getoption("--thread-leaks")), "thread-leaks")
