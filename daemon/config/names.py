"""The names a tenant's objects get on a scheduler, and the check that no two tenants share one.

A tenant's Slurm hold is a reservation named ``<prefix>-<tenant>``, and on Kubernetes its hold label value,
quota and Kueue queues carry ``name_part(tenant)``. A tenant name that is not usable as it is (odd characters,
upper case on Kubernetes, too long, the pool's word) gets a readable form plus six hex digits of its SHA-1. So
that such a hashed name can never be another tenant's own name (``ml_team-b4aa16`` beside ``ml team``, whose
hold is ``<prefix>-ml_team-b4aa16``), a tenant whose name already ends like a hash (``-`` and six hex digits) is
hashed too: a name is either plain (never ending so) or hashed (always ending so), and two hashed names are the
same only when the readable form and the hash are, which `collisions` finds so that the config is refused.

These live in the config so that validation can check them; the actuators use them from here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.config.models_policy import TenantConfig

POOL = "pool"   # the Slurm pool hold is <prefix>-pool: no tenant's hold may be named so
_LOOKS_HASHED = re.compile(r"-[0-9a-f]{6}$")


def _hash6(tenant: str) -> str:
    return hashlib.sha1(tenant.encode()).hexdigest()[:6]


def slurm_hold_name(prefix: str, tenant: str) -> str:
    """The reservation that holds `tenant`'s GPUs: ``<prefix>-<tenant>`` when the tenant's name is a valid
    reservation name, is not ``pool`` and does not end like a hash; else ``<prefix>-<tenant, odd characters as
    '_'>-<6 hex of its SHA-1>`` (module docstring: injective over a config `collisions` accepts)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", tenant)
    if safe == tenant and tenant != POOL and not _LOOKS_HASHED.search(tenant):
        return f"{prefix}-{tenant}"
    return f"{prefix}-{safe}-{_hash6(tenant)}"


def k8s_name_part(tenant: str) -> str:
    """A tenant name as a label value and DNS-1123 name part (lower case, at most 47 characters): the name itself
    when it is one already and does not end like a hash, else its readable form and 6 hex of its SHA-1."""
    s = re.sub(r"[^a-z0-9-]+", "-", tenant.lower()).strip("-")[:40].strip("-") or "t"
    return s if s == tenant and not _LOOKS_HASHED.search(tenant) else f"{s}-{_hash6(tenant)}"


def collisions(tenants: list[str]) -> list[str]:
    """One line per pair of tenants whose Slurm hold or Kubernetes name part would be the same (only a clash of
    the six-digit hash can do it now), naming both, so the config is refused before two tenants share a hold."""
    out = []
    for what, name_of in (("Slurm hold", lambda t: slurm_hold_name("", t)), ("Kubernetes name", k8s_name_part)):
        seen: dict[str, str] = {}
        for t in tenants:
            n = name_of(t)
            if n in seen and seen[n] != t:
                out.append(f"tenants {seen[n]!r} and {t!r} would share the {what} {n.lstrip('-')!r}; rename one")
            seen.setdefault(n, t)
    return out


def tenant_namespaces(tenants: Iterable[TenantConfig]) -> dict[str, str]:
    """tenant -> namespace, for configured tenants only; kube-* namespaces are never a tenant's."""
    out = {}
    for t in tenants:
        ns = t.k8s_namespace or t.name
        if not ns.startswith("kube-"):
            out[t.name] = ns
    return out


def tenant_accounts(tenants: Iterable[TenantConfig]) -> dict[str, str]:
    """tenant -> the Slurm account its jobs run under (slurm_account, default its name), as Slurm spells it:
    lower-case (its account names are case-insensitive; squeue prints 'team-big' for --account=Team-Big). As
    written, a tenant named Team-Big matched none of its jobs: its work nobody's, its demand none."""
    return {t.name: (t.slurm_account or t.name).lower() for t in tenants}


def named_tenant(value: str, tenant_of: Mapping[str, str], tenants: Container[str], kind: str) -> str:
    """The tenant a scheduler's name for work (a namespace, an account: `kind`) stands for: its tenant in
    `tenant_of`; else the value itself, unless it is a tenant's name (that tenant's work runs under another):
    then ``@<kind>:<value>``, which no tenant is called ('@' is refused in a tenant's name). Read as the name it
    is, work under an account or namespace called like tenant 'ml' (whose own is 'ml-prod') was ml's."""
    t = tenant_of.get(value)
    if t is not None:
        return t
    return f"@{kind}:{value}" if value in tenants else value
