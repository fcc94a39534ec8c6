"""GPU-step books kept beside a SimCluster, independently of what its step() reports and of the replay's Meter.

- running: one entry per job stint (job id, step it started) read from the job table after every step, closed
  when the job stops running (finished, preempted, requeued, or its node failed): GPUs x steps it ran;
- draining: each preemption of a job running on a healthy node drains its GPUs for `drain_steps` (seen by
  drain_steps - 1 step reports), cut short when the node fails;
- capacity: the healthy GPUs of every step, from the node failures and restores the cluster was told about.

Conservation is then: what step() reported as served per tenant equals the running book per tenant, and every
healthy GPU-step is running, draining or free (free as step() reported it). A preempted job whose GPUs are
never released, or a job counted twice, breaks one of them."""

from __future__ import annotations

import numpy as np

from daemon.sim.cluster import RUNNING, SimCluster


class BookedSimCluster(SimCluster):
    instances: list["BookedSimCluster"] = []   # every one made, for a replay that makes its own

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        BookedSimCluster.instances.append(self)
        self.b_open: dict[tuple[int, int], tuple[int, int]] = {}      # (id, started) -> (tenant, GPUs)
        self.b_stints: list[tuple[int, int, int, int]] = []            # (tenant, GPUs, first step, last step)
        self.b_drains: list[list[int]] = []                            # [node, GPUs, drained at step]
        self.b_down: set[int] = set()
        self.b_capacity = 0
        self.b_draining = 0
        # what step() reported, summed
        self.r_served = np.zeros(self.n)
        self.r_free = 0

    # ---- the actions, logged --------------------------------------------------------------------
    def preempt(self, job_ids):
        ids = np.asarray(job_ids, dtype=np.int64)
        pos = np.flatnonzero(np.isin(self.j_id[: self.size], ids) & (self.j_state[: self.size] == RUNNING))
        for p in pos.tolist():
            node = int(self.j_node[p])
            if node not in self.b_down:
                self.b_drains.append([node, int(self.j_gpus[p]), self.step_no + self.drain_steps])
        return super().preempt(job_ids)

    def fail_node(self, node: int, requeue: bool = True):
        self.b_down.add(int(node))
        self.b_drains = [d for d in self.b_drains if d[0] != int(node)]
        return super().fail_node(node, requeue)

    def restore_node(self, node: int) -> list[int]:
        self.b_down.discard(int(node))
        return super().restore_node(node)

    # ---- one step, booked -----------------------------------------------------------------------
    def step(self, wanted_gpus):
        stats = super().step(wanted_gpus)
        s = self.step_no
        self.b_drains = [d for d in self.b_drains if d[2] > s]
        self.b_draining += sum(d[1] for d in self.b_drains)
        self.b_capacity += int(self.node_cap.sum()) - sum(int(self.node_cap[i]) for i in self.b_down)
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        now = {}
        for p in run.tolist():
            if int(self.j_node[p]) not in self.b_down:
                now[(int(self.j_id[p]), int(self.j_started_at[p]))] = (int(self.j_tenant[p]), int(self.j_gpus[p]))
        for key in self.b_open.keys() - now.keys():       # stopped running before this step
            t, g = self.b_open.pop(key)
            self.b_stints.append((t, g, key[1], s - 1))
        for key in now.keys() - self.b_open.keys():
            self.b_open[key] = now[key]
        self.r_served += stats.served
        self.r_free += stats.free_gpus
        return stats

    # ---- the books ------------------------------------------------------------------------------
    def stints(self) -> list[tuple[int, int, int, int]]:
        return self.b_stints + [(t, g, k[1], self.step_no) for k, (t, g) in self.b_open.items()]

    def running_now(self) -> np.ndarray:
        """GPUs per tenant of the stints open after the last step (the jobs running on healthy nodes)."""
        out = np.zeros(self.n)
        for t, g in self.b_open.values():
            out[t] += g
        return out

    def running_per_step(self) -> np.ndarray:
        """(step_no + 1, tenants): GPUs running per tenant at each step, from the stints alone."""
        out = np.zeros((self.step_no + 1, self.n))
        for t, g, a, b in self.stints():
            out[a: b + 1, t] += g
        return out

    def running_gpu_steps(self) -> np.ndarray:
        out = np.zeros(self.n)
        for t, g, a, b in self.stints():
            out[t] += g * (b - a + 1)
        return out

    def check_conserved(self) -> None:
        run = self.running_gpu_steps()
        assert np.array_equal(run, self.r_served), f"served per tenant {self.r_served} != job stints {run}"
        total = run.sum() + self.b_draining + self.r_free
        assert total == self.b_capacity, (f"healthy GPU-steps {self.b_capacity} != running {run.sum()} + "
                                          f"draining {self.b_draining} + free {self.r_free}")


def disrupt(c: SimCluster, rng: np.random.Generator, r: float) -> None:
    """The property tests' disruptions of a simulated cluster, chosen by `r` (uniform in [0, 1), drawn by the
    caller, who gives r < 0.4 to the hold actions): 0.40-0.55 preempt up to three running jobs at random,
    0.55-0.58 fail a random node (requeueing its jobs or not), 0.58-0.62 restore every failed node (its jobs
    preempted first); otherwise nothing."""
    if 0.4 <= r < 0.55:
        running = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        c.preempt(c.j_id[rng.choice(running, size=min(running.size, 3), replace=False)] if running.size else [])
    elif 0.55 <= r < 0.58:
        c.fail_node(int(rng.integers(c.n_nodes)), requeue=bool(rng.integers(2)))
    elif 0.58 <= r < 0.62:
        for node in np.flatnonzero(~c.node_ok):
            c.preempt(c.j_id[c.running_on(node)])
            c.restore_node(int(node))
