"""What the metrics say, bounded by what the scheduler knows (issue 36).

Prometheus stores whatever its targets expose, so a series named like the DCGM exporter's may come from a
tenant's own pod. The queries select the exporter's scrape job (source.prometheus.exporter_selector); these bounds
are the second line, for whatever still gets through (a relabelling mistake, a tenant job with honor_labels):

- capacity: GPUs on nodes the scheduler does not list are not capacity, and a node holds at most the GPUs the
  scheduler says it has. Where the capacity answer does not say the node (the default `count(...)`), the cluster
  holds at most the scheduler's GPUs in all.
- demand: a tenant uses at most the GPUs of its own running jobs on the scheduler; the rest is capped and
  reported (the plan's demand_capped, gpuas_demand_capped_gpus, one log line per tenant per change). A name the
  scheduler's view does not cover (no configured tenant, no job listed: on Kubernetes, pods of other namespaces
  are not listed) is left as it is. Where the view lists every job of the cluster (Slurm's squeue:
  ListsClusterJobs.lists_every_job) it covers every name: one with no job listed runs none here (another cluster's
  exporter, a stale series) and is capped to 0, all such names said in one line per change (unlisted_line).
- silence: a node the scheduler lists up (GPUs > 0) with running GPU jobs, that counts fewer GPUs in an answer
  naming nodes than those jobs hold there, has a silent exporter, wholly (crashed, its scrape broken: no series) or
  in part (a GPU lost off the bus, excluded, re-partitioned); past the missing query's 15 minutes its tenants' GPUs
  would read as fewer than they run, or 0. Each tenant with a running GPU job there is missing (NaN), never idle.

Pure functions: no I/O, no clock. Only applied where a scheduler view exists (a Slurm or Kubernetes actuator
lists the jobs and nodes); without one the metrics are all there is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container

import numpy as np

from daemon.policy.state import Jobs, Nodes
from daemon.text import plural

UNNAMED = ""   # bound_capacity's key for GPUs over the scheduler's total when the answer names no node


def bound_capacity(answer: list[tuple[dict[str, str], float]], node_label: str,
                   nodes: Nodes | None) -> tuple[int, dict[str, int]]:
    """(capacity, GPUs dropped per node) from a capacity answer and the scheduler's node view.

    Without a view the answer is summed as it is. With one: if every series names its node (``node_label``) and
    at least one such node is the scheduler's, each listed node counts at most the scheduler's GPUs there and an
    unlisted node counts nothing. Otherwise (no node in the answer, or no name in common: the names are spelt
    differently, say FQDN against short names) the sum counts at most the scheduler's GPUs in all, and the
    excess is reported under UNNAMED.
    """
    total = int(sum(v for _, v in answer))
    if nodes is None:
        return total, {}
    listed = {str(n): int(g) for n, g in zip(nodes.names.tolist(), nodes.gpus.tolist())}
    if answer and all(labels.get(node_label) for labels, _ in answer):
        by_node: dict[str, float] = defaultdict(float)
        for labels, v in answer:
            by_node[labels[node_label]] += v
        if by_node.keys() & listed.keys():
            kept = {n: min(int(v), listed[n]) for n, v in by_node.items() if n in listed}
            dropped = {n: int(v) - kept.get(n, 0) for n, v in by_node.items() if int(v) > kept.get(n, 0)}
            return int(sum(kept.values())), dropped
    capacity = min(total, sum(listed.values()))
    return capacity, ({UNNAMED: total - capacity} if total > capacity else {})


def uncovered_use(tenants: tuple[str, ...], used: np.ndarray, covered: np.ndarray) -> dict[str, int]:
    """GPUs in use per name the scheduler's view does not cover (cap_demand leaves them in the load), where any."""
    return {tenants[i]: int(round(used[i])) for i in np.flatnonzero(~covered & (np.nan_to_num(used) > 0))}


def _first_names(names: dict[str, int]) -> str:
    """The first five names in order, "..." after them when there are more: a line names a sample, not thousands."""
    return ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")


def dropped_line(dropped: dict[str, int], stray: dict[str, int]) -> str:
    """The warning for GPUs left out of capacity (bound_capacity's ``dropped``). Where names the scheduler runs no
    job for still hold GPUs (``stray``, uncovered_use), it names them and the key that leaves them out: a Prometheus
    scraping another cluster's exporters under the same job read "load=1500%" with a line that said only that the
    GPUs were not capacity."""
    shown = ", ".join(f"{n or 'over the scheduler total'}: {g}" for n, g in sorted(dropped.items())[:10])
    out = f"{sum(dropped.values())} GPU(s) the metrics report are not capacity, not on the scheduler's nodes ({shown})"
    if stray:
        out += (f"; {sum(stray.values())} GPU(s) of {plural(len(stray), 'name')} the scheduler runs no job for "
                f"({_first_names(stray)}) still count as load: if those nodes are another cluster's, select this "
                "cluster's exporter with source.prometheus.exporter_selector")
    return out


def unlisted_line(unlisted: dict[str, int]) -> str:
    """The warning for names capped to 0 because a view that lists every job of the cluster lists none of theirs
    (``unlisted``: name -> GPUs capped): it names them and the key that leaves their series out. Counted, another
    cluster's tenants read "load=1500%" and tightened every tenant's rate limits. None left: the line that says so."""
    if not unlisted:
        return "no GPUs in the metrics of names the scheduler runs no job for any more"
    return (f"{sum(unlisted.values())} GPU(s) of {plural(len(unlisted), 'name')} the scheduler runs no job for "
            f"({_first_names(unlisted)}) are not this cluster's load: demand capped to 0 (the scheduler lists every "
            "job of the cluster, so these series are another cluster's or stale); select this cluster's exporter "
            "with source.prometheus.exporter_selector")


def cap_demand(used: np.ndarray, jobs: Jobs, covered: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(used capped, GPUs capped) per tenant: at most the GPUs of the tenant's running jobs on the scheduler.

    ``used`` is indexed like the jobs' tenant column; unknown (NaN) stays unknown. A tenant using fewer GPUs than
    its jobs hold (a job just started, its series not scraped yet) is left as it is: only an excess is removed.
    ``covered`` (bool per tenant, default all): the tenants whose jobs the scheduler's view lists; the others are
    left as they are (their jobs are not known, so none is not proof of forging)."""
    used = np.asarray(used, dtype=float)
    run = jobs.running
    running = np.bincount(jobs.tenant[run], weights=jobs.gpus[run].astype(float), minlength=len(used))[:len(used)]
    excess = np.where(np.isfinite(used), np.maximum(used - running, 0.0), 0.0)
    if covered is not None:
        excess = np.where(covered, excess, 0.0)
    return used - excess, excess


def bound_demand(used: np.ndarray, tenants: tuple[str, ...], jobs: Jobs, covered: np.ndarray,
                 configured: Container[str]) -> tuple[np.ndarray, dict[str, int], dict[str, int], dict[str, int]]:
    """(used capped, GPUs capped per name, uncovered_use, unlisted): cap_demand with its reports. ``unlisted`` (name
    -> GPUs capped) holds the capped names that are no ``configured`` tenant and have no job listed: capped only where
    the view covers them because it lists every job of the cluster (PrometheusSource._covered), said in one line
    (unlisted_line) rather than one per name as a tenant's."""
    used, excess = cap_demand(used, jobs, covered=covered)
    capped = {tenants[i]: int(round(excess[i])) for i in np.flatnonzero(excess > 0)}
    listed = set(np.unique(jobs.tenant).tolist())
    unlisted = {t: capped[t] for i, t in enumerate(tenants) if t in capped and i not in listed and t not in configured}
    return used, capped, uncovered_use(tenants, used, covered), unlisted


def mark_silent(used: np.ndarray, answer: list[tuple[dict[str, str], float]], node_label: str,
                nodes: Nodes | None, jobs: Jobs) -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """(used with NaN for each tenant running a GPU job on a silent node, {silent node: (GPUs unseen, in use)}).

    A node is silent where the scheduler lists it up (GPUs > 0) with running GPU jobs on it and the ``answer``
    (capacity_query's where it names nodes, else nodes_query's: the caller, PrometheusSource._reporting) counts
    fewer GPUs there at this step than those jobs hold: none (its exporter crashed, its scrape broke) or some (a GPU
    fallen off the bus, DCGM restarted with a GPU excluded, a MIG re-partition). In use there: the running jobs'
    parts (``Jobs.parts``: a job on several nodes has its share on each), at most the node's GPUs (shard or MPS
    jobs sharing a GPU count one each, never more than the node has); reported: the sum of the node's series'
    values. Only a count below what is in use tells: a MIG node's exporter reports each instance (more series than
    GPUs where the scheduler counts whole GPUs), which is neither silent nor extra here (bound_capacity caps it),
    and where a node has free GPUs the lost one may be one of them (nothing hidden).

    Which tenants: each one running a GPU job on a silent node, not only the one on the lost GPU. The rule that
    matches a lost GPU's index to the job holding it needs the scheduler to name each job's GPU indices, and no
    view read here does (squeue's %b counts GPUs, a pod lists its requests; Slurm's IDX is in ``scontrol -d`` only
    and a device's ID in the kubelet's node-local PodResources API), so the job on the lost GPU cannot be told and
    every tenant there is unknown (NaN), never idle. Their GPUs read on other nodes are not kept: unknown, not a
    partial count.

    Only judged where the answer says nodes as bound_capacity reads them (every series names its node, at least one
    the scheduler's): an answer that names none (the default ``count(...)``), or spells every name otherwise,
    cannot tell a silent node, so nothing changes. ``used`` is indexed like the jobs' tenant column."""
    used = np.asarray(used, dtype=float)
    if nodes is None or not answer or not all(labels.get(node_label) for labels, _ in answer):
        return used, {}
    names = [str(n) for n in nodes.names.tolist()]
    reported: dict[str, float] = defaultdict(float)
    for labels, v in answer:
        reported[labels[node_label]] += v
    if not reported.keys() & set(names):
        return used, {}
    rows = np.flatnonzero(jobs.running & (jobs.gpus > 0))
    pos, at, g = jobs.parts(nodes, rows)
    on = at >= 0
    in_use = np.minimum(np.bincount(at[on], weights=g[on], minlength=len(names)), nodes.gpus).astype(np.int64)
    seen = np.floor([reported.get(n, 0.0) for n in names]).astype(np.int64)
    unseen = np.maximum(in_use - seen, 0)   # a node down (0 GPUs) has none in use: never silent
    quiet = on & (unseen[np.where(on, at, 0)] > 0)
    if not quiet.any():
        return used, {}
    out = used.copy()
    tenants = jobs.tenant[rows[pos[quiet]]]
    out[tenants[tenants < len(out)]] = np.nan
    return out, {names[i]: (int(unseen[i]), int(in_use[i])) for i in sorted(np.flatnonzero(unseen > 0),
                                                                           key=lambda i: names[i])}
