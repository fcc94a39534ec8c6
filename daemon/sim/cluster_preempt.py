"""What is done to the simulated cluster's jobs and nodes from outside a step: preemption (the job
requeues, its GPUs drain, work since its last checkpoint is lost), a node's failure and its return."""

from __future__ import annotations

import numpy as np

from daemon.sim.cluster_jobs import QUEUED, RUNNING, UNHELD


class Preemption:
    """SimCluster's actions: preempt jobs, fail and restore nodes."""

    # ---- actions -----------------------------------------------------------------------------
    def preempt(self, job_ids: np.ndarray) -> tuple[int, float]:
        """Requeue running jobs: their GPUs drain for `drain_steps`, progress since checkpoint is lost."""
        if len(job_ids) == 0:
            return 0, 0.0
        ids = np.asarray(job_ids, dtype=np.int64)
        pos = np.flatnonzero(np.isin(self.j_id[: self.size], ids) & (self.j_state[: self.size] == RUNNING))
        if pos.size == 0:
            return 0, 0.0
        g, node, ten = self.j_gpus[pos], self.j_node[pos], self.j_tenant[pos]
        lost_each = g * ((self.step_no - self.j_started_at[pos]) % self.checkpoint_steps)
        lost = float(lost_each.sum())
        alive = self.node_ok[node]
        if self.drain_steps > 0:
            self.d_until = np.r_[self.d_until, np.full(int(alive.sum()), self.step_no + self.drain_steps)]
            self.d_node = np.r_[self.d_node, node[alive]]
            self.d_gpus = np.r_[self.d_gpus, g[alive]]
        else:
            np.add.at(self.node_free, node[alive], g[alive])
            np.add.at(self.node_pre, node[alive], g[alive])
        self.j_state[pos] = QUEUED
        self.j_queued_at[pos] = self.step_no
        self.j_node[pos] = -1
        self.total_preemptions += int(pos.size)
        self.total_lost += lost
        self.preempted_per_tenant += np.bincount(ten, minlength=self.n)
        self.lost_per_tenant += np.bincount(ten, weights=lost_each, minlength=self.n)
        return int(pos.size), lost

    def running_on(self, node: int) -> np.ndarray:
        """Positions of the jobs running (or stranded) on `node`."""
        return np.flatnonzero((self.j_node[: self.size] == node) & (self.j_state[: self.size] == RUNNING))

    def fail_node(self, node: int, requeue: bool = True) -> list[int]:
        """Mark a node down and return the ids of the jobs that were on it.

        With ``requeue=False`` the jobs are left stranded (still 'running' on a
        dead node, serving nothing), as on a real cluster before anyone reacts;
        the daemon's node-failure handler then requeues them.
        """
        self.node_ok[node] = False
        on = self.running_on(node)
        if requeue:
            self.j_state[on] = QUEUED
            self.j_queued_at[on] = self.step_no
            self.j_node[on] = -1
        self.node_free[node] = 0
        self.node_pre[node] = 0
        self.node_holder[node] = UNHELD
        keep = self.d_node != node
        self.d_until, self.d_node, self.d_gpus = self.d_until[keep], self.d_node[keep], self.d_gpus[keep]
        return [int(self.j_id[p]) for p in on]

    def stranded(self) -> np.ndarray:
        """Positions of jobs 'running' on a node that is down."""
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        return run[~self.node_ok[self.j_node[run]]]

    def restore_node(self, node: int) -> list[int]:
        """Bring a failed node back, empty; return the ids of the jobs still stranded on it, now requeued.

        A node that comes back has lost the processes it ran (Slurm requeues such jobs as NODE_FAIL), so a job
        nobody requeued while the node was down goes back to the queue here. Marking the node fully free while
        those jobs still counted as running on it booked its GPUs twice.
        """
        if self.node_ok[node]:
            return []
        on = self.running_on(node)
        self.j_state[on] = QUEUED
        self.j_queued_at[on] = self.step_no
        self.j_node[on] = -1
        self.node_ok[node] = True
        self.node_free[node] = self.node_cap[node]
        return [int(self.j_id[p]) for p in on]
