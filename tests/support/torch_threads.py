"""Which thread set torch's thread count to what: torch's count is per thread, so a forecast in a thread of its own
(the forecast bank's prefetch, a spread refresh, the daemon's cycles) must set it there (forecaster/threads.py)."""

from __future__ import annotations

import contextlib
import threading


@contextlib.contextmanager
def torch_thread_calls(monkeypatch, start: int | None = None):
    """Yields the list of (thread name, n) of every torch.set_num_threads(n) made inside; the count is `start` in
    this thread meanwhile when given, and what it was before afterwards."""
    import torch

    calls: list[tuple[str, int]] = []
    real = torch.set_num_threads

    def spy(n):
        calls.append((threading.current_thread().name, n))
        real(n)

    before = torch.get_num_threads()
    monkeypatch.setattr(torch, "set_num_threads", spy)
    if start is not None:
        real(start)
    try:
        yield calls
    finally:
        real(before)
