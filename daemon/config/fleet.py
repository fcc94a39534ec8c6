"""GPU types: the names a mixed fleet's GPUs go by, and what a job accepts.

Every source spells a GPU model its own way (DCGM's ``modelName`` "NVIDIA H100 80GB HBM3", Slurm's GRES type
``h100``, the ``nvidia.com/gpu.product`` label "NVIDIA-H100-80GB-HBM3", a MIG resource ``nvidia.com/mig-1g.10gb``),
so the policy, the forecast and the actuators only ever see the normalised type this module gives: one short
name per model, chosen by the operator in ``[fleet]``. A name that matches no type is ``unknown`` (kept and
reported, never dropped), and a cluster with no ``[fleet]`` types is one pool of type ``gpu``, exactly as before
types existed.

Pure and dependency-free (pydantic only), so the policy, the sources, the actuators and the simulator can all
import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field, model_validator

from gateway.configfile import Strict as _Strict

DEFAULT_TYPE = "gpu"      # every GPU's type in a cluster with no [fleet] types (one model, as before)
UNKNOWN_TYPE = "unknown"  # a model name no type or alias matches: counted and reported, never dropped
ANY: tuple[str, ...] = ()  # what a job that names no type accepts
_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_MIG_PREFIXES = ("nvidia.com/mig-", "mig-")
# unknown model names a resolver remembers (to report them): a pod's node selector is the tenant's to write, so
# the names are not bounded by the fleet; past this many, new ones are counted (`unmatched_dropped`), not kept
UNMATCHED_MAX = 1000


def _key(raw: str) -> str:
    """The spelling-insensitive form of a model name: case, spaces, dashes and underscores do not matter, so
    "NVIDIA H100 80GB HBM3" (DCGM) and "NVIDIA-H100-80GB-HBM3" (the product label) are one name."""
    return re.sub(r"[\s_-]+", " ", raw.strip().lower())


class NodePool(_Strict):
    """A group of identical nodes of the simulated cluster (the real schedulers report their own nodes)."""

    type: str = Field(description="the GPU type of these nodes (one of fleet.types)")
    nodes: int = Field(gt=0, description="how many nodes of this type")
    gpus_per_node: int = Field(8, gt=0, description="GPUs per node of this type (a MIG type counts instances)")


class FleetConfig(_Strict):
    types: list[str] = Field(default_factory=list, description="the GPU types of a mixed fleet, short names "
                             "(for example [\"h100\", \"a100\", \"t4\"]; a MIG profile such as "
                             "\"mig-1g.10gb\" is a type of its own), matched ignoring case wherever a type is "
                             "named (pools, aliases, reserve_share, a history's `tenant@T4` columns). Empty: one "
                             "model, every GPU is type \"gpu\"")
    aliases: dict[str, str] = Field(default_factory=dict, description="model names as the sources spell them -> "
                                    "a type (for example \"NVIDIA H100 80GB HBM3\" = \"h100\"); matched ignoring "
                                    "case, spaces, dashes and underscores. A type's own name always matches it")
    reserve_share: dict[str, float] = Field(default_factory=dict, description="the high tier's guaranteed share of "
                                            "each type's GPUs, per type; a type not listed uses "
                                            "policy.reserve_share")
    pools: list[NodePool] = Field(default_factory=list, description="the simulated cluster's nodes per type "
                                  "(replaces cluster.gpus / cluster.gpus_per_node for the simulator when set)")

    @model_validator(mode="before")
    @classmethod
    def _types_ignore_case(cls, data: Any) -> Any:
        """A type is named the same whatever its case, as aliases and the sources' model names are matched:
        `pools = [{type = "P100"}]` is type p100, not an error (nor a second type)."""
        if not isinstance(data, dict):
            return data
        def low(v: Any) -> Any:
            return v.strip().lower() if isinstance(v, str) else v

        out = dict(data)
        if isinstance(out.get("types"), list):
            out["types"] = [low(t) for t in out["types"]]
        if isinstance(out.get("aliases"), dict):
            out["aliases"] = {k: low(v) for k, v in out["aliases"].items()}
        if isinstance(out.get("reserve_share"), dict):
            out["reserve_share"] = {low(k): v for k, v in out["reserve_share"].items()}
        if isinstance(out.get("pools"), list):
            out["pools"] = [{**q, "type": low(q["type"])} if isinstance(q, dict) and "type" in q else q
                            for q in out["pools"]]
        return out

    @model_validator(mode="after")
    def _consistent(self) -> "FleetConfig":
        for t in self.types:
            if not _TYPE_NAME.match(t):
                raise ValueError(f"fleet.types: {t!r} is not a type name (lowercase letters, digits, '.', '_', "
                                 "'-'; up to 63 characters)")
            if t in (UNKNOWN_TYPE,):
                raise ValueError(f"fleet.types: {t!r} is reserved for model names that match no type")
        if len(set(self.types)) != len(self.types):
            raise ValueError(f"fleet.types: listed twice: {sorted({t for t in self.types if self.types.count(t) > 1})}")
        known = set(self.types)
        seen: dict[str, tuple[str, str]] = {}
        for raw, typ in self.aliases.items():
            if typ not in known:
                raise ValueError(f"fleet.aliases: {raw!r} maps to {typ!r}, which is not in fleet.types {self.types}")
            k = _key(raw)
            if k in seen and seen[k][1] != typ:
                raise ValueError(f"fleet.aliases: {seen[k][0]!r} and {raw!r} are one name (case, spaces and dashes "
                                 f"do not count) mapped to two types, {seen[k][1]!r} and {typ!r}")
            if k in {_key(t) for t in self.types} and k != _key(typ):
                raise ValueError(f"fleet.aliases: {raw!r} is the name of type {k!r} but maps to {typ!r}")
            seen[k] = (raw, typ)
        for typ, share in self.reserve_share.items():
            if typ not in known:
                raise ValueError(f"fleet.reserve_share: {typ!r} is not in fleet.types {self.types}")
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"fleet.reserve_share.{typ}: {share} is not a share between 0 and 1 of that "
                                 "type's GPUs")
        for i, p in enumerate(self.pools):
            if p.type not in (known or {DEFAULT_TYPE}):
                raise ValueError(f"fleet.pools[{i}].type: {p.type!r} is not in fleet.types {self.types}")
        return self

    @property
    def typed(self) -> bool:
        """Whether the cluster is a mixed fleet; False keeps every behaviour of the one-model cluster."""
        return bool(self.types)

    def resolver(self) -> "TypeResolver":
        return TypeResolver(self.types, self.aliases)


class TypeResolver:
    """Normalises the model names the sources report to the configured types; remembers the names it could not
    place so they can be reported (a typo in an alias must be seen, not silently become a pool of its own)."""

    def __init__(self, types: Iterable[str] = (), aliases: Mapping[str, str] | None = None):
        self.types: tuple[str, ...] = tuple(types)
        self._map = {_key(t): t for t in self.types}
        self._map.update({_key(raw): typ for raw, typ in (aliases or {}).items()})
        self.unmatched: set[str] = set()   # at most UNMATCHED_MAX names
        self.unmatched_dropped = 0          # unknown names seen after that, not remembered
        self._dropped_said = 0

    def __call__(self, raw: str | None) -> str:
        """The type of a GPU reported as ``raw`` (a model name, GRES type, product label or MIG resource)."""
        if not self.types:
            return DEFAULT_TYPE
        if raw is None or not str(raw).strip():
            self._unmatched("")
            return UNKNOWN_TYPE
        s = str(raw).strip()
        hit = self.known(s)
        if hit is None:
            self._unmatched(s)
            return UNKNOWN_TYPE
        return hit

    def known(self, raw: str) -> str | None:
        """The configured type `raw` names (a type, an alias, a MIG resource of a type), None when none: nothing
        is remembered (a node feature that is no GPU type is another constraint, not an unknown GPU)."""
        s = str(raw).strip()
        hit = self._map.get(_key(s))
        if hit is None:
            low = s.lower()
            for prefix in _MIG_PREFIXES:
                if low.startswith(prefix):  # nvidia.com/mig-1g.10gb, DCGM's GPU_I_PROFILE "1g.10gb" needs an alias
                    hit = self._map.get(_key("mig-" + low[len(prefix):]))
                    break
        return hit

    def unreported(self, reported: set[str]) -> str | None:
        """What to warn of once: the unknown names not in `reported` (added to it), and how many were not kept
        since the last warning said so; None when there is nothing new."""
        new = self.unmatched - reported
        reported |= new
        dropped = self.unmatched_dropped - self._dropped_said
        self._dropped_said = self.unmatched_dropped
        if not new and not dropped:
            return None
        said = [str(sorted(new))] if new else []
        return "; ".join(said + ([f"{dropped} more names not kept (over {UNMATCHED_MAX})"] if dropped else []))

    def _unmatched(self, name: str) -> None:
        if name in self.unmatched:
            return
        if len(self.unmatched) < UNMATCHED_MAX:
            self.unmatched.add(name)
        else:
            self.unmatched_dropped += 1

    def accepts(self, spec: str | Iterable[str] | None) -> tuple[str, ...]:
        """What a job accepts, in order of preference: ``"V100M16|V100M32"`` or a list of names gives those types
        (duplicates dropped, order kept); ``None``, ``""``, ``"*"`` or ``"any"`` give ``ANY`` (every type)."""
        if spec is None:
            return ANY
        parts = [p for p in (spec.split("|") if isinstance(spec, str) else list(spec)) if str(p).strip()]
        if not parts or any(str(p).strip().lower() in ("*", "any") for p in parts):
            return ANY
        out: list[str] = []
        for p in parts:
            t = self(p)
            if t not in out:
                out.append(t)
        return tuple(out)


def accepts_type(accepts: tuple[str, ...], gpu_type: str) -> bool:
    """Whether a job that accepts ``accepts`` may run on a GPU of ``gpu_type`` (``ANY`` runs anywhere; a job
    that accepts only ``unknown`` runs nowhere, because no node is reserved for a name nobody recognised)."""
    return not accepts or (gpu_type in accepts and gpu_type != UNKNOWN_TYPE)
