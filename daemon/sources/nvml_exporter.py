"""Optional node exporter: reads GPUs directly through NVML (pynvml) and maps GPU processes to tenants.

For nodes where DCGM exporter is not deployed. A node without an NVIDIA
driver keeps serving, with ``gpuas_node_nvml_up 0`` and the reason in the log,
so a DaemonSet spread over mixed nodes does not crash-loop.

Whose a process is comes from where the scheduler put it, never from what the process says: its Slurm job id
from its cgroup path (``/proc/<pid>/cgroup``: ``.../job_<id>/step_0/...``, made by slurmstepd, which the job
cannot move itself out of), then that job's account asked of Slurm (``squeue -j``); a Kubernetes pod from its
cgroup's pod UID. The process's environment (``SLURM_JOB_ACCOUNT``) is the user's to set and is not read. It
serves on 127.0.0.1 unless told another address (``node-exporter --host``): the per-process series name jobs
and tenants.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("gpu_autoscaler.nvml")
SLURM_JOB_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
K8S_POD_CGROUP = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def job_of_pid(pid: int, proc: Path = Path("/proc")) -> tuple[str, str] | None:
    """("slurm", job id) or ("k8s", pod UID) from the process's cgroup path; None when neither (or unreadable).
    The first ``job_<id>`` of the path is slurmstepd's own, above anything created under it."""
    try:
        cg = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    for line in cg.splitlines():
        path = line.split(":", 2)[-1]
        m = SLURM_JOB_CGROUP.search(path)
        if m:
            return "slurm", m.group(1)
    m = K8S_POD_CGROUP.search(cg)
    return ("k8s", m.group(1).replace("_", "-")) if m else None


class SlurmAccounts:
    """A Slurm job id -> its account, asked of slurmctld (``squeue -h -j <id> -o %a``) and kept `ttl_s`: a running
    job's account does not change, and the exporter is scraped every few seconds. None when Slurm does not say
    (no such job, squeue failing or slow); that is not cached, so the next scrape asks again."""

    def __init__(self, squeue: str = "squeue", timeout_s: float = 5.0, ttl_s: float = 300.0,
                 env: dict[str, str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.squeue, self.timeout_s, self.ttl_s, self.env, self.clock = squeue, timeout_s, ttl_s, env, clock
        self._known: dict[str, tuple[str, float]] = {}

    def __call__(self, job_id: str) -> str | None:
        now = self.clock()
        hit = self._known.get(job_id)
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        try:
            r = subprocess.run([self.squeue, "-h", "-j", job_id, "-o", "%a"], capture_output=True, text=True,
                               timeout=self.timeout_s, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("squeue for job %s: %s", job_id, exc)
            return None
        account = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
        if not account:
            return None
        if len(self._known) > 10_000:  # jobs come and go: never grow without bound
            self._known = {j: v for j, v in self._known.items() if now - v[1] < self.ttl_s}
        self._known[job_id] = (account, now)
        return account


def tenant_of_pid(pid: int, proc: Path = Path("/proc"),
                  account_of: Callable[[str], str | None] = lambda _job: None) -> str:
    """The Slurm account of the process's job (from its cgroup, then `account_of` the job id), else
    ``slurm-job-<id>`` when Slurm does not say, ``k8s-pod-<uid>`` for a pod, ``unknown`` for anything else."""
    found = job_of_pid(pid, proc)
    if found is None:
        return "unknown"
    kind, ident = found
    if kind == "k8s":
        return f"k8s-pod-{ident}"
    return account_of(ident) or f"slurm-job-{ident}"


class NvmlCollector:
    def __init__(self, account_of: Callable[[str], str | None] | None = None, proc: Path = Path("/proc")) -> None:
        import pynvml

        self.account_of = account_of or SlurmAccounts()
        self.proc = proc
        self.nvml = pynvml
        self.error: str | None = None
        try:
            pynvml.nvmlInit()
            self.count = pynvml.nvmlDeviceGetCount()
            self.driver = pynvml.nvmlSystemGetDriverVersion()
            if isinstance(self.driver, bytes):
                self.driver = self.driver.decode()
        except pynvml.NVMLError as exc:
            self.count = 0
            self.driver = ""
            self.error = f"no NVIDIA driver: {exc}"

    def collect(self):
        up = GaugeMetricFamily("gpuas_node_nvml_up", "1 when NVML answered", labels=["driver"])
        up.add_metric([self.driver], 0 if self.error else 1)
        yield up
        if self.error:
            return
        nv = self.nvml
        util = GaugeMetricFamily("gpuas_node_gpu_utilization_ratio", "GPU busy share", labels=["gpu", "uuid", "model"])
        mem = GaugeMetricFamily("gpuas_node_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu", "uuid"])
        total = GaugeMetricFamily("gpuas_node_gpu_memory_total_bytes", "GPU memory", labels=["gpu", "uuid"])
        procs = GaugeMetricFamily("gpuas_node_gpu_process_memory_bytes", "GPU memory per process and tenant",
                                  labels=["gpu", "pid", "tenant"])
        for i in range(self.count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = nv.nvmlDeviceGetUUID(h)
            name = nv.nvmlDeviceGetName(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            name = name.decode() if isinstance(name, bytes) else name
            u = nv.nvmlDeviceGetUtilizationRates(h)
            m = nv.nvmlDeviceGetMemoryInfo(h)
            util.add_metric([str(i), uuid, name], u.gpu / 100.0)
            mem.add_metric([str(i), uuid], float(m.used))
            total.add_metric([str(i), uuid], float(m.total))
            try:
                running = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except nv.NVMLError:
                running = []
            for p in running:
                used = getattr(p, "usedGpuMemory", None) or 0
                procs.add_metric([str(i), str(p.pid), tenant_of_pid(p.pid, self.proc, self.account_of)], float(used))
        yield from (util, mem, total, procs)


def registry(account_of: Callable[[str], str | None] | None = None) -> tuple[CollectorRegistry, NvmlCollector]:
    reg = CollectorRegistry()
    col = NvmlCollector(account_of)
    reg.register(col)
    return reg, col
