"""Hold flaps: a tenant's hold that shrinks and grows back, or grows and shrinks back, within a short window.

Each flap is a pair of plan changes (two `plan_change` events in the console) that left the hold about where it
was; the replay counts them per strategy so that a hysteresis that lets holds flap shows in its figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# the window a reversal counts in: the console showed a hold going 144 <-> 152 several times in 15 minutes
FLAP_WINDOW_S = 15 * 60


@dataclass
class FlapCounter:
    """Feed it each step's holds (tenant -> GPUs, absent = 0) in order with ``observe``; ``changes`` counts the
    steps where a tenant's hold moved, ``flaps`` the moves that reverse the tenant's previous move no more than
    ``window_steps`` steps after it. The first observation only sets where the holds start."""

    window_steps: int
    changes: int = 0
    flaps: int = 0
    _held: dict[str, int] | None = None
    # tenant -> (direction of its last move, +1 or -1; the step of that move)
    _last_move: dict[str, tuple[int, int]] = field(default_factory=dict)

    def observe(self, step: int, holds: Mapping[str, float]) -> None:
        now = {t: int(v) for t, v in holds.items() if int(v) != 0}
        if self._held is None:
            self._held = now
            return
        for t in set(self._held) | set(now):
            before, after = self._held.get(t, 0), now.get(t, 0)
            if before == after:
                continue
            self.changes += 1
            way = 1 if after > before else -1
            prev = self._last_move.get(t)
            if prev is not None and prev[0] == -way and step - prev[1] <= self.window_steps:
                self.flaps += 1
            self._last_move[t] = (way, step)
        self._held = now
