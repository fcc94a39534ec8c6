"""Picking whole nodes for a hold, shared by the Slurm reservations and the Kubernetes node holds.

Both actuators rank candidate nodes by one rule (``rank``) from what their scheduler tells them, and take
nodes from that ranking one way (``pick``), so that both (and the simulator, which holds as Slurm does) grow
and keep a hold the same way. The rule: the nodes the hold already has (no churn); then nodes that can be
cleared (no work there of another owner that cannot be preempted: as the hold stops new starts they empty,
and the rest can be preempted), then those with the least such work; among equals the highest score (the
holder's GPUs there + free GPUs + GPUs the plan's preemptions free); then by name.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class SizedNode(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> int: ...


def rank(nodes: Sequence[SizedNode], current: set[str] | tuple[str, ...], firm: dict[str, int],
         score: dict[str, int]) -> list[SizedNode]:
    """`nodes` in the order a hold takes them (module docstring). `firm`: per node, GPUs of other owners' work
    that cannot be preempted; `score`: per node, the holder's GPUs + free GPUs + GPUs the plan frees."""
    return sorted(nodes, key=lambda n: (n.name not in current, firm.get(n.name, 0), -score.get(n.name, 0), n.name))


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
