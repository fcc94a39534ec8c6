"""Whether a replayed window's demand ever contends for GPUs: if it does not, no strategy can differ.

Every strategy serves all demand that fits beside the high tier's pool (static's `policy.reserve_share` of the
GPUs): holds, preemptions and forecasts only matter when work would otherwise wait. A history whose peak stays
under that (a real pod list peaking at 65 GPUs replayed on its 6,212) runs every strategy at the same figures,
with nothing unmet, and a recommendation drawn from it would be noise. The replay says so, and how large a cluster
the demand would fill.

On a mixed fleet (`[fleet] pools`) work runs only on the types it accepts, so demand can contend for one type while
the fleet as a whole is idle: for every set of types, the demand that accepts only types in that set is set against
those types' GPUs beside the pool's share (Hall's condition, over the type sets).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd

MAX_TYPES_ALL_SETS = 12  # more types than this: only the sets the columns accept, and the whole fleet, are checked


@dataclass(frozen=True)
class Contention:
    contends: bool
    peak_gpus: int             # the window's peak of total demand
    peak_at: str
    capacity: int
    free_gpus: int             # capacity less the high tier's pool: what every strategy gives any work
    where: str                 # "cluster", or on a fleet the type set whose demand comes closest to its GPUs
    message: str | None = None  # why the replay cannot tell strategies apart, and how to size it (no contention)

    def to_dict(self) -> dict:
        return asdict(self)


def beside_pool(gpus: int, share: float) -> int:
    """GPUs left beside the high tier's static pool on `gpus` GPUs (the pool is floor(share x gpus), as static's)."""
    return gpus - int(math.floor(share * gpus))


def smallest_uncontended(peak: int, share: float) -> int:
    """The fewest GPUs whose share beside the pool holds `peak`: below this the peak contends."""
    if share >= 1:
        return 0 if peak <= 0 else -1
    c = max(peak, 1)
    while beside_pool(c, share) < peak:
        c += 1
    return c


def check(window: pd.DataFrame, capacity: int, share: float, *, gpus_per_node: int,
          accepts: Sequence[tuple[str, ...]] | None = None, type_gpus: dict[str, int] | None = None,
          where: str = "the history", capacity_key: str = "cluster.gpus") -> Contention:
    """Whether the replayed `window` (time x column GPU demand, whole GPUs) ever contends on `capacity` GPUs with
    `share` of them pooled for the high tier; on a fleet, `accepts` per column (() = any type) and `type_gpus`
    (GPUs per type). The message, when it never does, names the peak, the room beside the pool and a size."""
    v = np.nan_to_num(window.to_numpy(dtype=float), nan=0.0)
    total = v.sum(axis=1) if v.size else np.zeros(len(window))
    k = int(np.argmax(total)) if total.size else 0
    peak = int(total[k]) if total.size else 0
    at = str(window.index[k]) if len(window) else "-"
    free = beside_pool(capacity, share)
    contends, closest = peak > free, ("cluster", peak / max(free, 1))
    if accepts is not None and type_gpus:
        sets = sorted({tuple(sorted(a)) for a in accepts if a})
        types = sorted(type_gpus)
        cands = ([frozenset(c) for n in range(1, len(types)) for c in itertools.combinations(types, n)]
                 if len(types) <= MAX_TYPES_ALL_SETS else [frozenset(s) for s in sets])
        by_set = {s: v[:, [i for i, a in enumerate(accepts) if a and tuple(sorted(a)) == s]].sum(axis=1)
                  for s in sets}
        for cand in cands:
            inside = [by_set[s] for s in sets if set(s) <= cand]
            if not inside:
                continue
            p = float(np.max(np.sum(inside, axis=0)))
            room = beside_pool(sum(type_gpus[t] for t in cand), share)
            if p > room:
                contends = True
            if p / max(room, 1) > closest[1]:
                closest = ("|".join(sorted(cand)), p / max(room, 1))
    msg = None
    if not contends:
        size = max(gpus_per_node, math.ceil(peak / gpus_per_node) * gpus_per_node)
        below = smallest_uncontended(peak, share)
        fleet = capacity_key != "cluster.gpus"
        how = (f"scale the [fleet] pools' nodes so their GPUs come to about {size} (the peak; contention starts "
               f"below {below})" if fleet else
               f"set [cluster] gpus = {size} (the peak on whole {gpus_per_node}-GPU nodes; contention starts below "
               f"{below})")
        msg = (f"{where}: demand never contends for GPUs: its peak, {peak} GPUs at {at}, stays within the {free} the "
               f"cluster's {capacity} ({capacity_key}) leave beside the high tier's pool (policy.reserve_share "
               f"{share:g}), so every strategy serves it all and the replay cannot tell them apart; no "
               f"recommendation. Replay it on a cluster its demand fills: {how}, or scale the file's demand up")
    return Contention(contends, peak, at, capacity, free, closest[0], msg)
