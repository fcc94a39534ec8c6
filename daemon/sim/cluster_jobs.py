"""What the simulated cluster's parts share: the job states, the hold markers, the job table's columns,
the step's record (StepStats) and a fast lexsort."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUEUED, RUNNING, DONE = 1, 2, 3
UNHELD = -1
NOT_ACCEPTED = 1 << 20   # acc_rank of a type a tenant's jobs may not run on
_COLS = ("j_id", "j_tenant", "j_gpus", "j_state", "j_queued_at", "j_started_at", "j_node", "j_wait", "j_stream")


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """The same permutation as ``np.lexsort(keys)`` (the last key sorts first; ties keep their order), faster:
    one stable sort per key, from the last-sorting key up, and a radix sort for a key that spans fewer than 2**16
    integer values (a tier, a tenant, a step number, GPUs on a node)."""
    order = None
    for key in keys:
        k = np.asarray(key)
        if order is not None:
            k = k[order]
        if k.dtype.kind == "b":
            k = k.view(np.uint8)
        elif k.dtype.kind in "iu" and k.size:
            lo = k.min()
            if int(k.max()) - int(lo) < 1 << 16:
                k = (k - lo).astype(np.uint16)
        o = np.argsort(k, kind="stable")
        order = o if order is None else order[o]
    return order if order is not None else np.zeros(0, dtype=np.int64)


@dataclass
class StepStats:
    """What one step did; the replay's meter sums these into its report."""

    running_gpus: int
    draining_gpus: int
    capacity: int
    free_gpus: int                # healthy GPUs neither running nor draining (held or not)
    served: np.ndarray            # GPUs running per tenant
    wanted: np.ndarray            # GPUs each tenant asked for this step
    queued: np.ndarray            # GPUs queued per tenant after scheduling
    started: np.ndarray           # (k, 3): steps this stint waited, steps waited in all stints, priority
