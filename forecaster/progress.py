"""Progress of long work (a replay sweep, a retrain, a backtest): a named phase with its done/total and ETA.

On a terminal it is a tqdm bar. Where stderr is not a terminal (a CI log, `2> file`, a pipe) a bar's carriage
returns would be one unreadable line, and tqdm shows nothing at all there by default, so a person watching the log
saw nothing for minutes: there it is a plain line every `every_s` seconds and at every tenth of the work, each
naming the phase, done/total, the elapsed time and the ETA (tqdm's own meter and estimate, so the two modes give
the same figures). A phase without a total (`phase`) prints when it starts and how long it took.

In the forecaster package (the lowest layer that both the forecaster's training and the daemon's replay import);
it has no state beyond one bar, and writes only to the stream it is given (stderr by default).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

# the plain line: phase, done/total, share, elapsed, ETA (tqdm's estimate)
PLAIN = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed} elapsed, ETA {remaining}"
EVERY_S = 30.0      # a plain line at least this often while work is done (and at every 10%)
ENV_EVERY = "GPUAS_PROGRESS_EVERY_S"  # overrides EVERY_S (a test or a busy log can set it)


def is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or a stream with no terminal behind it
        return False


def every_s_default() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_EVERY, EVERY_S)))
    except ValueError:
        return EVERY_S


class Progress:
    """`total` units of named work. ``update(n)`` as units are done, ``set_phase(name)`` when the named part
    changes (a sweep's setting), ``close()`` at the end (or use it as a context manager). ``enabled=False``
    prints nothing (a quiet run). ``tty`` forces the mode (default: whether `stream` is a terminal)."""

    def __init__(self, name: str, total: int, *, unit: str = "steps", stream: TextIO | None = None,
                 enabled: bool = True, tty: bool | None = None, every_s: float | None = None) -> None:
        self.name, self.total, self.unit = name, max(0, int(total)), unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = is_tty(self.stream) if tty is None else tty
        self.every_s = every_s_default() if every_s is None else every_s
        self.n = 0
        self.detail = ""
        self.t0 = time.monotonic()
        self._last_line = self.t0
        self._last_tenth = 0
        self._closed = False
        self._bar = None
        if not enabled:
            return
        if self.tty:
            self._bar = tqdm(total=self.total, desc=name, unit=unit.rstrip("s") or unit, file=self.stream,
                             dynamic_ncols=True, leave=False)
        else:
            self._line()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _desc(self) -> str:
        return f"{self.name} [{self.detail}]" if self.detail else self.name

    def line(self) -> str:
        """The plain line for where the work is now."""
        return tqdm.format_meter(self.n, self.total, time.monotonic() - self.t0, prefix=self._desc(),
                                 unit=self.unit, bar_format=PLAIN)

    def _line(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._last_line = time.monotonic()

    def set_phase(self, detail: str) -> None:
        """Name the part of the work now running (shown beside the phase's name)."""
        self.detail = detail
        if self._bar is not None:
            self._bar.set_description(self._desc(), refresh=False)

    def note(self, text: str) -> None:
        """A line of its own (an epoch's losses) that does not break the bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        if not self.enabled or self._closed:
            return
        self.n = min(self.total, self.n + n) if self.total else self.n + n
        if self._bar is not None:
            self._bar.update(n)
            return
        tenth = (10 * self.n) // self.total if self.total else 0
        if tenth > self._last_tenth or time.monotonic() - self._last_line >= self.every_s:
            self._last_tenth = tenth
            if self.n < self.total:   # the last line is close()'s
                self._line()

    def close(self) -> None:
        if self._closed or not self.enabled:
            self._closed = True
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        took = tqdm.format_interval(time.monotonic() - self.t0)
        print(f"{self.name}: done, {self.n}/{self.total} {self.unit} in {took}", file=self.stream, flush=True)


@contextmanager
def phase(name: str, *, stream: TextIO | None = None, enabled: bool = True) -> Iterator[None]:
    """A named phase with no count (reading a file, writing a report): a line when it starts and one with how
    long it took, so a silent stretch of the log always has a name."""
    out = stream if stream is not None else sys.stderr
    t0 = time.monotonic()
    if enabled:
        print(f"{name}...", file=out, flush=True)
    yield
    if enabled:
        print(f"{name}: done in {tqdm.format_interval(time.monotonic() - t0)}", file=out, flush=True)
