"""The small interface every metrics source implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from daemon.policy.state import ClusterState


class SourceError(Exception):
    """The source could not be read this cycle (down, timed out, refused). The daemon keeps its last plan."""


@dataclass(frozen=True)
class Collected:
    history: pd.DataFrame   # time x tenant demand in GPUs; NaN = no sample
    state: ClusterState


class Source(Protocol):
    def collect(self, history_steps: int) -> Collected:
        """Read history and the live state. Raise SourceError when the source is unreachable."""
        ...
