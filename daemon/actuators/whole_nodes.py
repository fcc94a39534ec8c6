"""Picking whole nodes for a hold, shared by the Slurm reservations and the Kubernetes node holds.

The two actuators rank candidate nodes by what their scheduler tells them; what they share is how a hold
takes nodes from that ranking, so that both (and the simulator, which holds as Slurm does) grow and keep a
hold the same way.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class SizedNode(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> int: ...


def pick(order: Sequence[SizedNode], current: set[str] | tuple[str, ...], gpus: int, keep: bool) -> list[str]:
    """Names of whole nodes from `order` covering `gpus`: every current node first when `keep` (a hold that
    may not shrink yet keeps all it has), then nodes in `order` until the GPUs are covered. Sorted."""
    picked = [n.name for n in order if keep and n.name in current]
    have = sum(n.gpus for n in order if n.name in picked)
    for n in order:
        if have >= gpus:
            break
        if n.name not in picked:
            picked.append(n.name)
            have += n.gpus
    return sorted(picked)
