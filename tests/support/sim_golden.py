"""A fixed script of demand, holds, preemptions and node failures driven through the simulator alone (no policy),
digested step by step. `tests/support/data/sim_golden.json` holds the digests the simulator gave before its speed-ups
(main at b8c152a + the replay worker change, 2026-12-04); tests/sim/test_replay_speed.py checks the simulator still
gives exactly these. A deliberate change of the physics regenerates it:

    PYTHONPATH=. python tests/support/sim_golden.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from daemon.sim.cluster import SimCluster

FIXTURE = Path(__file__).resolve().parent / "data" / "sim_golden.json"


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()[:16]


def drive(seed: int = 5, steps: int = 400) -> list:
    """One row per step: the step's totals and a digest of everything the step returned and of the job table."""
    rng = np.random.default_rng(seed)
    n = 40
    prio = rng.choice([0, 0, 1, 1, 2], size=n).astype(np.int8)
    job = rng.choice([1, 2, 4, 8], size=n)
    cap = 8 * 30 + 4
    c = SimCluster([f"t{i}" for i in range(n)], prio, cap, job, gpus_per_node=8, drain_steps=2, checkpoint_steps=7,
                   max_wait_steps=15)
    level = rng.uniform(0, 14, n)
    rows = []
    for k in range(steps):
        level = np.maximum(level + rng.normal(0, 1.5, n), 0)
        want = np.round(level * (1 + 0.6 * np.sin(k / 40 + np.arange(n))))
        want[rng.uniform(size=n) < 0.03] = np.nan  # gaps: no change
        st = c.step(want)
        if k % 5 == 2:  # preempt a few running jobs (and one unknown id)
            run = c.j_id[: c.size][c.j_state[: c.size] == 2]
            if run.size:
                c.preempt(np.r_[rng.choice(run, size=min(run.size, 6), replace=False), 10**9])
        if k % 11 == 0:  # holds: a few tenants hold nodes (set directly: the simulator's hold choice aside)
            c.node_holder[:] = -1
            nodes = rng.choice(c.n_nodes, size=8, replace=False)
            c.node_holder[nodes] = rng.choice(n, size=8)
            c.node_holder[~c.node_ok] = -1
            c.normal_cap = int(rng.integers(60, 200)) if k % 22 == 0 else None
        if k % 53 == 10:
            c.fail_node(int(rng.integers(c.n_nodes)), requeue=bool(k % 2))
        if k % 53 == 40:
            for d in np.flatnonzero(~c.node_ok):
                for p in c.stranded():
                    if c.j_node[p] == d:
                        c.preempt(c.j_id[[p]])
                c.restore_node(int(d))
        live = np.flatnonzero(c.j_state[: c.size] != 3)  # queued or running, in submission order
        rows.append([st.running_gpus, st.draining_gpus, st.capacity, st.free_gpus,
                     int(np.nansum(st.queued)), int(st.started.shape[0]),
                     _digest(st.served, st.wanted, st.queued, st.started),
                     _digest(c.j_id[live], c.j_tenant[live], c.j_state[live], c.j_node[live], c.j_wait[live],
                             c.node_free, c.node_pre, c.starvation(), c.preempted_per_tenant, c.lost_per_tenant,
                             np.array([c.preempted_idle, c.preempted_retaken, c.total_preemptions]))])
        c.check_invariants()
    return rows


if __name__ == "__main__":
    rows = drive()
    if "--write" in sys.argv:
        FIXTURE.write_text(json.dumps(rows, separators=(",", ":")) + "\n")
        print(f"wrote {FIXTURE} ({len(rows)} steps)")
    else:
        print(json.dumps(rows[-3:]))
