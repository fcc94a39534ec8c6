"""What every config section shares: the tier names and the error a human must fix."""

from __future__ import annotations

from typing import Literal

Tier = Literal["high", "normal", "low"]
TIERS: tuple[Tier, ...] = ("high", "normal", "low")


class ConfigError(Exception):
    """A config problem a human must fix; the CLI prints it on one line and exits 2."""
