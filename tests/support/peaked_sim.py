"""A simulated cluster whose demand is constructed, not drawn: tenant-0001 takes 40 GPUs more from 14:00 to 15:00
UTC every day over a base of 20, tenant-0002 a flat 30. Swapped in for the simulator's generator
(daemon.sim.source.generate) around build_runtime, so a daemon on the embedded simulator plays it, and writes it to
its history store, as it plays its own."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pandas as pd
import pytest

from daemon.sim.workloads import SyntheticWorkload

PEAKED, FLAT = "tenant-0001", "tenant-0002"


def peaked_generate(n_tenants: int, steps: int, capacity: int, *, seed: int = 42, step_s: int = 60,
                    start: str = "2026-01-04T13:30:00Z", **_) -> SyntheticWorkload:
    """generate()'s signature, the constructed demand (the other settings are not read)."""
    idx = pd.date_range(pd.Timestamp(start), periods=steps, freq=pd.Timedelta(seconds=step_s), name="time")
    rng = np.random.default_rng(seed)
    minute = idx.hour * 60 + idx.minute
    peak = np.where((minute >= 14 * 60) & (minute < 15 * 60), 40.0, 0.0)
    demand = pd.DataFrame({PEAKED: np.round(20 + peak + rng.normal(0, 2, steps)),
                           FLAT: np.round(30 + rng.normal(0, 3, steps))}, index=idx).clip(lower=0)
    demand.columns.name = "tenant"
    return SyntheticWorkload(demand, ("normal", "normal"), np.array([2, 2]), np.array([True, False]))


@contextmanager
def peaked_simulator() -> Iterator[None]:
    """The simulator built in this block plays the constructed demand."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("daemon.sim.source.generate", peaked_generate)
        yield
