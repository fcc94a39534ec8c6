"""Picking whole nodes for a hold, shared by the Slurm reservations and the Kubernetes node holds.

Both actuators rank candidate nodes by one rule (``rank``) from what their scheduler tells them, and take
nodes from that ranking one way (``pick``), so that both (and the simulator, which holds as Slurm does) grow
and keep a hold the same way. The rule: the nodes the hold already has (no churn); then nodes that can be
cleared (no work there of another owner that cannot be preempted: as the hold stops new starts they empty,
and the rest can be preempted), then those with the least such work; among equals the highest score (the
holder's GPUs there + free GPUs + GPUs the plan's preemptions free); then by name. A node the hold has but can
never use (``usable``: other owners' work that cannot be preempted leaves less room than the holder's job) is not
kept, so that the hold moves to one it can use, as the simulator does.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class SizedNode(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> int: ...


def usable(nodes: Sequence[SizedNode], current: set[str] | tuple[str, ...], firm: dict[str, int],
           job_gpus: int) -> set[str]:
    """The `current` nodes the holder can still use: room for a job of `job_gpus` GPUs once everything that may be
    preempted is gone (`firm`: per node, GPUs of other owners' work that cannot be preempted). A node whose size is
    not known here is kept."""
    size = {n.name: n.gpus for n in nodes}
    return {c for c in current if c not in size or firm.get(c, 0) <= size[c] - max(int(job_gpus), 1)}


def rank(nodes: Sequence[SizedNode], current: set[str] | tuple[str, ...], firm: dict[str, int],
         score: dict[str, int], prefer: set[str] | tuple[str, ...] = ()) -> list[SizedNode]:
    """`nodes` in the order a hold takes them (module docstring). `firm`: per node, GPUs of other owners' work
    that cannot be preempted; `score`: per node, the holder's GPUs + free GPUs + GPUs the plan frees. `prefer`:
    nodes that win a tie of those two before the name does (a pick made afresh that should not move for nothing)."""
    return sorted(nodes, key=lambda n: (n.name not in current, firm.get(n.name, 0), -score.get(n.name, 0),
                                        n.name not in prefer, n.name))


def pick(order: Sequence[SizedNode], current: set[str] | tuple[str, ...], gpus: int, keep: bool,
         shape: tuple[int, int] | None = None) -> list[str]:
    """Names of whole nodes from `order` covering `gpus`: every current node first when `keep` (a hold that
    may not shrink yet keeps all it has), then nodes in `order` until the GPUs are covered. Sorted.

    `shape` (nodes, GPUs per node): the hold is for jobs on several nodes each (Slurm's ``-N 3 --gpus-per-node=4``):
    it covers ``ceil(gpus / (nodes * per node))`` such jobs, each on `nodes` distinct nodes with room for its GPUs
    per node, so it takes at least `nodes` nodes with at least that many GPUs, and enough of them for every job's
    parts (a node of 8 takes two parts of 4), and only such nodes. Covered by GPUs alone, 12 GPUs for a job of
    3 nodes x 4 were two nodes of 8, where it never starts."""
    n_per, g_per = (1, 0) if shape is None else (max(int(shape[0]), 1), max(int(shape[1]), 1))
    parts = n_per * -(-max(int(gpus), 0) // (n_per * g_per)) if g_per else 0

    def slots(n: SizedNode) -> int:
        return n.gpus // g_per if g_per else 0

    picked = [n.name for n in order if keep and n.name in current]
    have = sum(n.gpus for n in order if n.name in picked)
    room = sum(slots(n) for n in order if n.name in picked)
    wide = sum(1 for n in order if n.name in picked and slots(n) > 0)
    for n in order:
        if have >= gpus and room >= parts and (not g_per or gpus <= 0 or wide >= n_per):
            break
        if n.name not in picked and (not g_per or slots(n) > 0):
            picked.append(n.name)
            have += n.gpus
            room += slots(n)
            wide += slots(n) > 0
    return sorted(picked)


def fits(order: Sequence[SizedNode], picked: Sequence[str], gpus: int) -> bool:
    """Whether `picked` takes no more than `gpus` rounded up to whole nodes: no node of it could go with the rest
    still covering `gpus` (on nodes of one size, at most ceil(gpus / their GPUs) nodes). A hold shaped for jobs on
    several nodes (``pick``'s `shape`) may take more (a node per node a job asks, -N 10 --gres=gpu:1: 10 nodes for
    10 GPUs); it takes that shape only where this holds, as the plan counts a hold at its GPUs."""
    size = {n.name: n.gpus for n in order}
    have = [size.get(p, 0) for p in picked]
    return not have or sum(have) - min(have) < int(gpus)
