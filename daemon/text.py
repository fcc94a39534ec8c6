"""Words for people: a count with its noun in the right number ("1 job", "3 jobs").

The lowest layer: it imports nothing of ours, so the policy, the health checks, the actuators, the service and
the CLI all say counts the same way (tests/project/test_layers.py).
"""

from __future__ import annotations


def plural(n: float, noun: str, many: str | None = None, fmt: str = "") -> str:
    """``n`` and ``noun``, the noun plural unless n is 1: ``plural(1, "job")`` is "1 job", ``plural(2, "job")``
    "2 jobs"; ``many`` gives an irregular plural (``plural(2, "series", "series")``), ``fmt`` the number's format
    spec (``plural(1500, "step", fmt=",")`` is "1,500 steps")."""
    return f"{n:{fmt}} {noun if n == 1 else (many or noun + 's')}"


def agree(n: float, one: str, many: str) -> str:
    """The word that agrees with a count of ``n``: ``agree(1, "has", "have")`` is "has"."""
    return one if n == 1 else many


def one_line(exc: BaseException) -> str:
    """An exception as one log line: its type and its message with every run of whitespace one space. Some
    clients' messages span lines (the Kubernetes client's ApiException is "(0)\\nReason: ...\\n"), and a line
    that says why a cycle kept its plan must stay one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
