"""The forecasts a replay's predictive settings read (`ForecastBank`): one model's forecasts on one trace, made
every few steps (the next one ahead in a thread, with ``prefetch``) and shared by a sweep's settings."""

from __future__ import annotations

import contextvars
import time

import pandas as pd

from forecaster.baselines import Forecaster
from forecaster.threads import carry_torch_threads
from forecaster.types import Forecast


class ForecastBank:
    """Forecasts of one model on one trace, made every `every` steps and kept, so every setting of a sweep
    reuses them (the horizon is shifted in between, as the daemon's last forecast ages between cycles).

    With ``keep=False`` only the newest forecast is kept (one setting: at 1,000 tenants a week of kept
    forecasts would be 3 GB). With ``prefetch`` the next forecast (the next `every` steps, up to `stop`) is made
    in a background thread while the simulator runs the steps in between; forecasts are made in the same
    order either way and depend only on the trace, so the results are the same."""

    def __init__(self, model: Forecaster, demand: pd.DataFrame, every: int, horizon: int, history: int, *,
                 keep: bool = True, prefetch: bool = False, stop: int | None = None) -> None:
        self.model, self.demand, self.every, self.horizon, self.history = model, demand, max(1, every), horizon, history
        self.keep, self.stop = keep, len(demand) if stop is None else stop
        self.made: dict[int, Forecast] = {}
        self.seconds = 0.0
        self._pool = None
        self._next: tuple[int, object] | None = None  # (base, future) being made in the background
        if prefetch:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="forecast-prefetch")

    def _make(self, base: int) -> Forecast:
        t0 = time.perf_counter()
        fc = self.model.predict(self.demand.iloc[max(0, base + 1 - self.history): base + 1], self.horizon)
        self.seconds += time.perf_counter() - t0
        return fc

    def _forecast(self, base: int) -> Forecast:
        fc = self.made.get(base)
        if fc is not None:
            return fc
        if self._next is not None and self._next[0] == base:
            fc = self._next[1].result()
        else:
            if self._next is not None:  # asked out of order: let the one in flight finish first
                other, fut = self._next
                if self.keep:
                    self.made[other] = fut.result()
                else:
                    fut.result()
            fc = self._make(base)
        self._next = None
        if not self.keep:
            self.made.clear()
        self.made[base] = fc
        nxt = base + self.every
        if self._pool is not None and nxt < self.stop and nxt not in self.made:
            # in a copy of this context: a scope the caller opened (forecaster/memo.py) holds for it too
            # with this thread's torch thread count (forecaster/threads.py: a new thread ran the LSTM on every core,
            # 13x slower on a busy box, and every predictive step of a sweep waited on it)
            self._next = (nxt, self._pool.submit(contextvars.copy_context().run, carry_torch_threads(self._make), nxt))
        return fc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._next = None

    def at(self, k: int) -> Forecast:
        base = k - k % self.every
        fc = self._forecast(base)
        return fc.shifted(k - base)
