"""GPU types in Slurm's words: typed GRES on nodes and jobs, node features in job constraints.

A mixed fleet in Slurm (22.05) is typed GRES: a node's ``Gres=gpu:a100:4`` (``scontrol show node``), a job's
``--gres=gpu:a100:2`` / ``--gpus-per-node=a100:2`` (squeue's tres-per-node ``gres:gpu:a100:2``). A job that
takes either of two models cannot say so with GRES (one type per request); it asks for an untyped GPU and
restricts the nodes by feature, ``--constraint="a100|t4"``, and says which it would rather have with
``--prefer=a100`` (new in 22.05; Slurm uses it when such nodes are free, else the constraint alone). Plain
``--constraint`` alternatives are not an order: Slurm picks among them by its own node order (best fit, node
Weight). So what a job accepts, in order of preference, is read from those three:

- a typed GRES request: that type only (a typed shard or MPS share too, ``shard:a100:2``: the type of the GPU it
  sits on); an untyped shard or MPS request: the types of the nodes that have that GRES (only they run it);
- an untyped request with a constraint naming GPU types (node features that are configured types or aliases):
  those types, the preferred ones first, then in the constraint's order;
- an untyped request with only ``--prefer``: every configured type, the preferred ones first (any type runs it);
- nothing typed: any type.

Features that are not GPU types (``ib``, ``nvme``) are other constraints and are ignored here. A node's type is
its GRES type, or (untyped GRES) a node feature that is a configured type; a node that has neither is type
``unknown`` and its GRES text is reported (daemon.config.fleet).

Pure: parsing only, no Slurm calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from daemon.config.fleet import ANY, TypeResolver

# one GRES entry as Slurm writes it: name[:type][:count] (squeue's gres:gpu:a100:2, a node's gpu:a100:4(S:0-1),
# GresUsed's gpu:a100:2(IDX:0-1)) or the tres form name[:type]=count (gres/gpu:a100=2), after an optional gres: or
# gres/; a count left out is 1, as Slurm takes it (--gres=gpu and --gpus-per-node=a100 print gres:gpu and
# gres:gpu:a100); a type is not all digits (gpu:4 is 4 untyped GPUs). Anything else (N/A, license/gpu=2, gpu:-1,
# gpu:a100:x) is no entry
_GRES_ENTRY = re.compile(r"(?:gres[:/])?([A-Za-z][A-Za-z0-9_-]*)"
                         r"(?::((?!\d+(?:[:=(]|$))[A-Za-z0-9_][A-Za-z0-9_.-]*))?(?:[:=](\d+))?(?:\(.*\))?")
# GRES that share a GPU (Slurm's shard and MPS): a job's count of them is a fraction of a GPU's, but the GPU they sit
# on is not Slurm's to give whole to another job while they run (a GPU is allocated as gpu or shared, not both);
# typed, they take the type of the GPU they sit on (a node's gpu:a100:4,shard:16 shows as shard:a100:16)
SHARING_KINDS = ("shard", "mps")
_FEATURE_SPLIT = re.compile(r"[|&,\[\]()]+")
_GRES_TOKEN = re.compile(r"[(),]|[^(),]+")


def gres_parts(text: str) -> list[str]:
    """Comma-separated GRES entries; commas inside a ``(S:0-1)`` / ``(IDX:0,2)`` suffix do not split.

    One pass over the text, tokens of runs between parentheses and commas, counting the depth: linear in the
    input's length (the look-ahead split this replaces scanned to the next parenthesis at every comma, quadratic
    in a long line of commas: 220 KB of node text took 16 s). An unclosed ``(`` keeps the rest in one entry."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for tok in _GRES_TOKEN.findall(text or ""):
        if tok == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth = max(0, depth - 1)
        cur.append(tok)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


@dataclass(frozen=True)
class GresEntry:
    name: str    # gpu, shard, mps, or a site's own (vgpu: no GPU)
    type: str    # "" when untyped
    count: int


def gres_entries(text: str) -> list[GresEntry]:
    """The GRES entries in a node's ``Gres=`` / ``GresUsed=`` or a job's tres-per-node / -job / -task / -socket, in
    order: ``gres:gpu:a100:2(IDX:0-1),gres/shard=3,gres:gpu`` -> gpu a100 2, shard 3, gpu 1 (_GRES_ENTRY). The one
    parser every reader of GRES text here uses (squeue.parse_gpus, holds' node GPUs, the types below)."""
    out = []
    for part in gres_parts(text):
        m = _GRES_ENTRY.fullmatch(part)
        if m:
            out.append(GresEntry(m.group(1), m.group(2) or "", int(m.group(3)) if m.group(3) is not None else 1))
    return out


def gres_gpus(text: str) -> int:
    """The GPUs in GRES text: the entries named gpu, whole (a site's vgpu is none)."""
    return sum(e.count for e in gres_entries(text) if e.name == "gpu")


def gres_gpu_types(text: str) -> dict[str, int]:
    """GPUs per GRES type in a node's ``Gres=`` or a job's tres-per-node: ``gpu:a100:4(S:0-1),gpu:t4:2`` ->
    ``{"a100": 4, "t4": 2}``; an untyped ``gpu:4`` / ``gres:gpu:2`` is under ``""``. Not a GPU (``gres:nvme:1``):
    not counted."""
    out: dict[str, int] = {}
    for e in gres_entries(text):
        if e.name == "gpu":
            out[e.type] = out.get(e.type, 0) + e.count
    return out


def gres_shared_types(text: str) -> list[str]:
    """The GPU types a job's typed shard or MPS requests sit on, in order: ``gres:shard:a100:2,gres:mps:t4:50`` ->
    ``["a100", "t4"]``; an untyped one (``gres:shard:2``) names none."""
    return list(dict.fromkeys(e.type for e in gres_entries(text) if e.name in SHARING_KINDS and e.type and e.count > 0))


def gres_shares(text: str) -> set[str]:
    """The GPU-sharing GRES kinds in a node's ``Gres=`` or a job's request: ``gpu:a100:4,shard:a100:16`` ->
    ``{"shard"}``; ``gres:mps:50`` -> ``{"mps"}``."""
    return {e.name for e in gres_entries(text) if e.name in SHARING_KINDS}


def known_type(resolver: TypeResolver, name: str) -> str | None:
    """The configured type `name` is (a type or an alias), None when it is none: a node feature or constraint
    term that is not a GPU type is another constraint, not an unknown GPU, so it is not reported."""
    if not resolver.types:
        return resolver(name)
    return resolver.known(name)


def feature_terms(expr: str) -> list[str]:
    """The feature names in a ``--constraint`` / ``--prefer`` expression, in order: ``[a100|t4]&ib`` ->
    ``["a100", "t4", "ib"]`` (a ``*2`` node count is dropped)."""
    if not expr or expr.strip() in ("(null)", "N/A"):
        return []
    return [t.split("*")[0].strip() for t in _FEATURE_SPLIT.split(expr) if t.split("*")[0].strip()]


def node_type(resolver: TypeResolver, gres: str, features: str = "") -> str:
    """A node's GPU type: its GRES type (the one with most GPUs when it has several), else a feature that is a
    configured type, else ``unknown`` (reported with the node's GRES text)."""
    typed = {t: n for t, n in gres_gpu_types(gres).items() if t}
    if typed:
        return resolver(max(sorted(typed), key=lambda t: typed[t]))
    for f in feature_terms(features):
        t = known_type(resolver, f)
        if t is not None:
            return t
    return resolver(f"untyped gres {gres or '(none)'}")


def job_gres_types(tres: str) -> list[str]:
    """The GPU types a job's requests name, in order, each once: its typed gpu GRES and the types its typed shard or
    MPS shares sit on (``gres:gpu:a100:1,gres:shard:t4:2`` -> ``["a100", "t4"]``)."""
    return list(dict.fromkeys([t for t in gres_gpu_types(tres) if t] + gres_shared_types(tres)))


def nodes_with_types(types: Sequence[str], nodes: Sequence[tuple[str, str]]) -> tuple[str, ...] | None:
    """For a job naming several GPU types at once (``--gres=gpu:a100:1,gpu:t4:1``, ``--gpus=a100:1,t4:1``): Slurm
    runs it only on a node that has all of them (seen on 22.05: sbatch refuses it where no node does, "Requested
    node configuration is not available", and a pending job updated to it waits with BadConstraints; --gpus with
    -N2 does not take them from two nodes either). `nodes`: (its GRES text, its type) of every node slurmctld
    knows, down or not (it may come back). The types of the nodes that have them all, in node order; None when
    none does: the job never starts. GRES types are compared as Slurm does, by name (case aside), not by alias."""
    need = {t.casefold() for t in types}
    on = [typ for text, typ in nodes if need <= {t.casefold() for t in gres_gpu_types(text) if t}]
    return tuple(dict.fromkeys(on)) if on else None


def job_accepts(resolver: TypeResolver, tres_per_node: str, features: str = "", prefer: str = "",
                share_types: Mapping[str, Sequence[str]] | None = None,
                nodes: Sequence[tuple[str, str]] | None = None) -> tuple[str, ...] | None:
    """The types a job accepts, in order of preference (module docstring); ``ANY`` when it names none. `tres_per_node`:
    its GRES requests, per node, job, task or socket, comma-separated. `share_types`: for an untyped shard or MPS
    request, the types of the nodes that have that GRES (where alone it runs; none known: not judged). `nodes`:
    (GRES text, type) of every node, for a job naming several types at once (nodes_with_types: the types of the
    nodes that have them all; None, it never starts, when no node has; not given: not judged). Read as accepting
    either, such a job was held for, and made room for, on nodes of one type that cannot start it."""
    named = job_gres_types(tres_per_node)
    if len(named) > 1 and nodes is not None:
        return nodes_with_types(named, nodes)
    typed = [t for t in gres_gpu_types(tres_per_node) if t] + gres_shared_types(tres_per_node)
    if typed:
        out: list[str] = []
        for t in typed:
            r = resolver(t)  # a typed request for a model nobody configured is reported, and runs nowhere held
            if r not in out:
                out.append(r)
        return tuple(out)
    allowed = [t for t in (known_type(resolver, f) for f in feature_terms(features)) if t is not None]
    preferred = [t for t in (known_type(resolver, f) for f in feature_terms(prefer)) if t is not None]
    shares = gres_shares(tres_per_node)
    if shares and share_types:
        on = [t for kind in sorted(shares) for t in share_types.get(kind, ())]
        if on:   # only nodes with the share run it: of those, the ones its constraint allows
            allowed = [t for t in allowed if t in on] if allowed else list(dict.fromkeys(on))
            if not allowed:
                return tuple(dict.fromkeys(on))   # a constraint no sharing node meets: it runs nowhere; say where
    if not allowed and not preferred:
        return ANY
    pool = allowed or list(resolver.types)
    order = [t for t in preferred if t in pool] + pool
    return tuple(dict.fromkeys(order))
