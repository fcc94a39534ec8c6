"""The start estimate where jobs ask several nodes (daemon/policy/eta.py: the scan's node tracking and _on_nodes),
each queue small enough to work out by hand. Every node has 8 GPUs; the jobs are of tenant n (index 2) unless said,
all of the normal tier, served in the order listed; a running job's end is its time limit (no history) unless said.
Found by a hand mutation pass: each test failed on a mutant of the scan that the tests before let through."""

from __future__ import annotations

import numpy as np
import pandas as pd

from daemon.policy.eta import RunLengths, estimate
from daemon.policy.state import PRIORITY, UNHELD, ClusterState, Jobs, Nodes
from tests.policy.test_eta import TENANTS, TIERS

N, A, H = 2, 0, 1   # tenant indices in TENANTS


def _state(nodes: list[tuple], running: list[tuple], pending: list[tuple],
           types: list[str] | None = None) -> ClusterState:
    """nodes: (name, free, held_by[, draining]); running: (id, tenant, GPUs, node or tuple of nodes);
    pending: (id, tenant, GPUs, nodes asked, packed), in the scheduler's order (the first waited longest)."""
    rows = [(i, t, g, True, n, 1, False) for i, t, g, n in running] + \
        [(i, t, g, False, "", k, p) for i, t, g, k, p in pending]
    ids, ten, gpus, run, where, asked, packed = zip(*rows)
    on = np.empty(len(rows), dtype=object)
    on[:] = [w if isinstance(w, tuple) else () for w in where]
    jobs = Jobs(ids=np.array(ids, dtype=object), tenant=np.array(ten), gpus=np.array(gpus),
                priority=np.full(len(rows), PRIORITY["normal"], dtype=np.int8), running=np.array(run),
                runtime_s=np.zeros(len(rows)), wait_s=np.array([0.0 if r else 1000.0 - i for i, r in enumerate(run)]),
                node=np.array([",".join(w) if isinstance(w, tuple) else w for w in where], dtype=object),
                nodes_asked=np.array(asked), packed=np.array(packed), on_nodes=on)
    view = Nodes(names=np.array([n[0] for n in nodes], dtype=object), gpus=np.full(len(nodes), 8),
                 free=np.array([n[1] for n in nodes]), draining=np.array([n[3] if len(n) > 3 else 0 for n in nodes]),
                 held_by=np.array([n[2] for n in nodes]),
                 gpu_type=None if types is None else np.array(types, dtype=object))
    used = np.bincount(jobs.tenant[jobs.running], weights=jobs.gpus[jobs.running], minlength=len(TENANTS))
    queued = np.bincount(jobs.tenant[~jobs.running], weights=jobs.gpus[~jobs.running], minlength=len(TENANTS))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS,
                        capacity=8 * len(nodes), used=used.astype(float), pending=queued.astype(float), jobs=jobs,
                        nodes=view, draining=int(sum(n[3] if len(n) > 3 else 0 for n in nodes)))


def _p50(st: ClusterState, limits: dict[str, float], rl: RunLengths | None = None) -> dict[str, float | None]:
    return {e.job_id: e.p50_s for e in estimate(st, rl or RunLengths(), time_limit_s=limits)}


def test_a_job_started_in_the_scan_takes_its_node_from_the_jobs_after_it():
    """n0 8 free, n1 full until 600, n2 4 free until R2 ends at 300. A (one node, 8) starts at 0 on n0; M (-N 2 x 4)
    waits: at 300 n2 has 8 but n0 is A's (one node with 4 free), at 600 n1 frees: M at 600, not 300."""
    st = _state([("n0", 8, UNHELD), ("n1", 0, UNHELD), ("n2", 4, UNHELD)],
                [("R1", A, 8, "n1"), ("R2", A, 4, "n2")], [("A", N, 8, 1, False), ("M", N, 8, 2, False)])
    assert _p50(st, {"R1": 600.0, "R2": 300.0}) == {"A": 0.0, "M": 600.0}


def test_gpus_draining_now_come_back_on_their_node():
    """n0 4 free (R until 900), n1 draining 8: at the drain time (120 s) n1 has 8, and M (-N 2 x 4) starts on n0 and
    n1. Its GPUs counted back in the pool alone, M found one node with 4 and never started."""
    st = _state([("n0", 4, UNHELD), ("n1", 0, UNHELD, 8)], [("R", A, 4, "n0")], [("M", N, 8, 2, False)])
    assert _p50(st, {"R": 900.0}) == {"M": 120.0}


def test_a_running_jobs_part_on_a_node_the_view_lacks_gives_back_nothing_known():
    """R runs on gn1 (in the view) and gx (not): at its end (100) gn1 gets 8 back, gx's 8 are on no node the scan
    knows. Z fills gn2 with no end known, Y runs on gz (not in the view) with none either. P (-N 2 x 4) needs two
    nodes: unknown, and the reason counts Z alone (Y is on no node of the view: not a release the scan waits for).
    The part on gx read as the view's last node (gn2) started P at 100; Y counted made it '2 running jobs'."""
    st = _state([("gn1", 0, UNHELD), ("gn2", 0, UNHELD)],
                [("R", A, 16, ("gn1", "gx")), ("Z", A, 8, "gn2"), ("Y", A, 8, "gz")], [("P", N, 8, 2, False)])
    got = {e.job_id: e for e in estimate(st, RunLengths(), time_limit_s={"R": 100.0})}
    assert got["P"].p50_s is None, got["P"]
    assert got["P"].basis == "unknown: 1 running job(s) have neither a time limit nor a run-length history"


def test_a_job_on_several_nodes_uses_only_nodes_it_may_and_of_one_type():
    """n1 is held for tenant h: M (n, -N 2 x 4) may not use it, so with n0 alone free to it M waits for n2 (600).
    On a mixed fleet (n0 a100, n1 and n2 h100, all unheld) M starts on two nodes of one type: h100's n1 and n2 at
    600, not a100's n0 and h100's n1 at 0."""
    nodes = [("n0", 8, UNHELD), ("n1", 8, H), ("n2", 0, UNHELD)]
    assert _p50(_state(nodes, [("R", A, 8, "n2")], [("M", N, 8, 2, False)]), {"R": 600.0}) == {"M": 600.0}
    mixed = _state([("n0", 8, UNHELD), ("n1", 8, UNHELD), ("n2", 0, UNHELD)], [("R", A, 8, "n2")],
                   [("M", N, 8, 2, False)], types=["a100", "h100", "h100"])
    assert _p50(mixed, {"R": 600.0}) == {"M": 600.0}


def test_a_gang_takes_its_tenants_own_hold_first_and_leaves_unheld_gpus_to_others():
    """n0 held for n (8 free), n1 unheld (4 free), n2 unheld (full until 600). G (n, 2 pods of 2) takes its pods on
    its own hold's n0; X (a, 2 pods of 2) then has n1's 4 unheld GPUs: both at 0. G on n1 (the fullest node, holder
    ignored) left X's pool room on no node: X at 600."""
    st = _state([("n0", 8, N), ("n1", 4, UNHELD), ("n2", 0, UNHELD)], [("R", A, 8, "n2")],
                [("G", N, 4, 2, True), ("X", A, 4, 2, True)])
    assert _p50(st, {"R": 600.0}) == {"G": 0.0, "X": 0.0}


def test_a_slurm_job_on_several_nodes_takes_its_tenants_own_hold_first():
    """n0 and n3 held for n (8 free each), n1 and n2 unheld (4 free each). M (n, -N 2 x 4) takes n0 and n3; X (a,
    -N 2 x 4) then starts on n1 and n2: both at 0. M on the fullest nodes (n1, n2: holder ignored) left X none."""
    st = _state([("n0", 8, N), ("n1", 4, UNHELD), ("n2", 4, UNHELD), ("n3", 8, N)], [],
                [("M", N, 8, 2, False), ("X", A, 8, 2, False)])
    assert _p50(st, {}) == {"M": 0.0, "X": 0.0}


def test_a_gang_and_a_slurm_job_fill_the_fullest_nodes_first():
    """Best fit leaves the larger holes whole. n0 and n1 8 free, n2 4: G (2 pods of 2) fills n2, and H (2 pods of 8)
    starts at once on n0 and n1. n0, n1, n3 8 free, n2 4: M (-N 2 x 4) takes n2 and n0, and K (-N 2 x 8) starts on n1
    and n3. Emptiest first, G took half of n0 and M half of n0 and n1: H and K never started (nothing ends)."""
    gang = _state([("n0", 8, UNHELD), ("n1", 8, UNHELD), ("n2", 4, UNHELD)], [],
                  [("G", N, 4, 2, True), ("H", N, 16, 2, True)])
    assert _p50(gang, {}) == {"G": 0.0, "H": 0.0}
    slurm = _state([("n0", 8, UNHELD), ("n1", 8, UNHELD), ("n2", 4, UNHELD), ("n3", 8, UNHELD)], [],
                   [("M", N, 8, 2, False), ("K", N, 16, 2, False)])
    assert _p50(slurm, {}) == {"M": 0.0, "K": 0.0}


def test_a_gang_takes_on_each_node_the_pods_it_puts_there():
    """n0 4 free, n1 8, n2 full until 600. G (2 pods of 4) puts one pod on n0, one on n1 (fullest first): n1 keeps
    4, and H (2 pods of 2) starts there at 0; G's second pod read as two on n1 left H to 600.
    n0 8 free, n1 3, n2 1 (R2 until 300). G (2 pods of 4) puts both on n0 (8 taken there); H (2 pods of 2) finds one
    pod's room on n1 and none on n2 until R2 ends: at 300. G's two pods read as one pod's GPUs left H n0's 4 at 0."""
    one_each = _state([("n0", 4, UNHELD), ("n1", 8, UNHELD), ("n2", 0, UNHELD)], [("R", A, 8, "n2")],
                      [("G", N, 8, 2, True), ("H", N, 4, 2, True)])
    assert _p50(one_each, {"R": 600.0}) == {"G": 0.0, "H": 0.0}
    two_on_one = _state([("n0", 8, UNHELD), ("n1", 3, UNHELD), ("n2", 1, UNHELD)], [("R2", A, 7, "n2")],
                        [("G", N, 8, 2, True), ("H", N, 4, 2, True)])
    assert _p50(two_on_one, {"R2": 300.0}) == {"G": 0.0, "H": 300.0}


def test_a_one_node_job_started_beside_a_job_on_several_nodes_takes_the_fullest_node_it_fits():
    """n0, n3 8 free, n1 4: A (one node, 4) takes n1, the fullest with room for it (exactly its 4), and K (-N 2 x 8)
    starts on n0 and n3 at 0. A on n0 (emptiest, or a node with more than it asks) left K one node of 8."""
    st = _state([("n0", 8, UNHELD), ("n1", 4, UNHELD), ("n3", 8, UNHELD)], [],
                [("A", N, 4, 1, False), ("K", N, 16, 2, False)])
    assert _p50(st, {}) == {"A": 0.0, "K": 0.0}


def test_a_one_node_job_no_node_holds_whole_takes_the_emptiest_nodes_and_no_more_than_it_asks():
    """n0 6 free, n1 2, n2 6: A (one node, 8; the pools have room, the scan starts it) takes 6 on n0 and 2 on n2
    (emptiest first, its 8 and no more): n1 2 and n2 4 are left, and M (-N 2 x 2) starts on them at 0. The fullest
    first (n1's 2, then n0's 6), or all of each node's free GPUs, left M one node."""
    st = _state([("n0", 6, UNHELD), ("n1", 2, UNHELD), ("n2", 6, UNHELD)], [],
                [("A", N, 8, 1, False), ("M", N, 4, 2, False)])
    assert _p50(st, {}) == {"A": 0.0, "M": 0.0}


def test_a_job_started_in_the_scan_gives_its_node_back_at_its_usual_end():
    """Tenant n's jobs run 100 s (its history). A (one node, 8) starts at 0 on n0 and gives n0 back at 100; M (-N 2
    x 4) starts then on n0 and n1 (4 free). A's GPUs given back to the pool alone, M waited for R (n2) at 5000."""
    rl = RunLengths(min_samples=5)
    for _ in range(5):
        rl.observe("n", 100.0)
    st = _state([("n0", 8, UNHELD), ("n1", 4, UNHELD), ("n2", 0, UNHELD)], [("R", A, 8, "n2"), ("S", A, 4, "n1")],
                [("A", N, 8, 1, False), ("M", N, 8, 2, False)])
    assert _p50(st, {"R": 5000.0, "S": 5000.0}, rl) == {"A": 0.0, "M": 100.0}


def test_a_slurm_job_on_several_nodes_that_found_no_room_does_not_hold_back_a_gang_as_large():
    """The scan skips a job as large as one of the same tenant and shape that found no room; a gang (pods that may
    share a node) is not the shape of a Slurm -N job (distinct nodes). n0 8 free, n1 full (until 600): M (-N 2 x 4)
    finds one node, and G (2 pods of 4, as large) still starts on n0 at 0; M never finds two nodes free (G keeps n0).
    Skipped as M's shape, G waited for n1 at 600."""
    st = _state([("n0", 8, UNHELD), ("n1", 0, UNHELD)], [("R", A, 8, "n1")],
                [("M", N, 8, 2, False), ("G", N, 8, 2, True)])
    assert _p50(st, {"R": 600.0}) == {"M": None, "G": 0.0}
