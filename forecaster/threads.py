"""Torch's intra-op thread count belongs to the thread that set it.

`torch.set_num_threads(1)` in one thread leaves a thread started later running torch's operators as if nobody had
set it (one OpenMP thread per core: `torch.get_num_threads()` there still says 1). On a busy 2-core box an LSTM
forecast made in such a thread took 456 ms where the thread that had set 1 made it in 34 ms (the shipped model, 32
Helios tenants, load average 10): a replay sweep's forecast prefetch thread made every predictive step wait on it.
`carry_torch_threads` wraps work handed to another thread so that it runs with the count of the thread handing it
over. In the forecaster package (the lowest layer): it imports torch only where torch is already loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def carry_torch_threads(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, run with the calling thread's torch thread count in whichever thread calls it (as it is where torch
    is not loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return fn
    n = torch.get_num_threads()

    def run(*args, **kwargs) -> T:
        torch.set_num_threads(n)
        return fn(*args, **kwargs)

    return run
