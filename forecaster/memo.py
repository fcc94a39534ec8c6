"""Past peak forecasts computed once per scoring run.

A backtest scores many candidates that wrap the same model: `lstm+peak`, `lstm+peak_all`, `lstm_conformal+peak`,
the blends' `+peak` variants all recalibrate their peaks on the same model's forecasts from the same recent
origins of the same history (`PeakCalibrated._past_peaks`), and that replay of the model at 256 past origins was
most of `retrain`'s time (at 1,000 tenants x 10 days under load: 970 s, against 25 s before peak calibration).
Within `shared_past_peaks()` each (model, history content, origins, horizon, windows) is computed once and the
copies handed out are equal to what a fresh computation gives (deterministic models: no sampling, eval mode).

Only scoring opens the scope (forecaster/backtest.py, and retrain's replay of its candidates in
daemon/forecasting/retrain.py, where every LSTM variant recalibrates on the same LSTM at the same replay steps):
the daemon's forecasts never cache, so a history revised by late samples can never be served an old answer, and
nothing grows in a long-running process. The scope is a context variable, so a thread started with the scope's
context (the replay's forecast prefetch, `contextvars.copy_context().run`) shares it; within it at most
`MAX_BYTES` of answers are kept (past that, requests are computed and not kept), so a replay of a large fleet
cannot run out of memory for the sake of speed.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

# a [256 origins, 1,000 tenants, 2 windows, 3 quantiles] float64 answer is 12 MB. retrain's replay recalibrates
# every 10 of its 1,680 forecasts (a day and the warm-up): 168 answers, 2 GB at 1,000 tenants, past this cap; there
# the first ~40 are shared and the rest recomputed per candidate (the candidates replay one after another)
MAX_BYTES = 512 * 2**20


class _Memo:
    """The answers of one scope and the bytes they hold (shared by the threads that run in the scope)."""

    def __init__(self) -> None:
        self.entries: dict[tuple, tuple] = {}
        self.bytes = 0


_MEMO: contextvars.ContextVar[_Memo | None] = contextvars.ContextVar("shared_past_peaks", default=None)


@contextlib.contextmanager
def shared_past_peaks() -> Iterator[None]:
    """Within this block (in this context, and threads run in a copy of it), `memo_peaks` computes each
    past-peaks request once."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set(_Memo())
    try:
        yield
    finally:
        _MEMO.reset(token)


def _key(model, history: pd.DataFrame, ends, horizon: int, windows) -> tuple:
    vals = np.ascontiguousarray(history.to_numpy(dtype=float))
    digest = hashlib.blake2b(vals.tobytes(), digest_size=16).hexdigest()
    return (id(model), tuple(map(str, history.columns)), str(history.index[0]) if len(history) else "",
            str(history.index[-1]) if len(history) else "", vals.shape, digest,
            tuple(int(e) for e in np.asarray(ends).ravel()), int(horizon), tuple(int(k) for k in windows))


def memo_peaks(model, history: pd.DataFrame, ends, horizon: int, windows,
               compute: Callable[[], np.ndarray | None]) -> np.ndarray | None:
    """`compute()`, or a copy of what it gave for the same request earlier in the scope."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    key = _key(model, history, ends, horizon, windows)
    hit = memo.entries.get(key)
    if hit is None:
        val = compute()
        size = 0 if val is None else val.nbytes
        if memo.bytes + size > MAX_BYTES:
            return val
        memo.bytes += size
        hit = (model, val)     # the model is kept alive with its entry: its id cannot be reused meanwhile
        memo.entries[key] = hit
    return None if hit[1] is None else hit[1].copy()


def memo_size() -> int:
    """Entries in the open scope (tests)."""
    memo = _MEMO.get()
    return 0 if memo is None else len(memo.entries)
