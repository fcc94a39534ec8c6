"""Optional node exporter: reads GPUs directly through NVML (pynvml) and maps GPU processes to tenants.

For nodes where DCGM exporter is not deployed. A node without an NVIDIA
driver keeps serving, with ``gpuas_node_nvml_up 0`` and the reason in the log,
so a DaemonSet spread over mixed nodes does not crash-loop.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("gpu_autoscaler.nvml")
SLURM_JOB_CGROUP = re.compile(r"/job_(\d+)")


def tenant_of_pid(pid: int, proc: Path = Path("/proc")) -> str:
    """Slurm account from the process environment, else the Kubernetes pod/Slurm job from its cgroup."""
    try:
        env = (proc / str(pid) / "environ").read_bytes().split(b"\0")
        for kv in env:
            if kv.startswith(b"SLURM_JOB_ACCOUNT="):
                return kv.split(b"=", 1)[1].decode(errors="replace")
    except OSError:
        pass
    try:
        cg = (proc / str(pid) / "cgroup").read_text()
        m = SLURM_JOB_CGROUP.search(cg)
        if m:
            return f"slurm-job-{m.group(1)}"
        m = re.search(r"pod([0-9a-f_-]{36})", cg)
        if m:
            return f"k8s-pod-{m.group(1).replace('_', '-')}"
    except OSError:
        pass
    return "unknown"


class NvmlCollector:
    def __init__(self) -> None:
        import pynvml

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
                procs.add_metric([str(i), str(p.pid), tenant_of_pid(p.pid)], float(used))
        yield from (util, mem, total, procs)


def registry() -> tuple[CollectorRegistry, NvmlCollector]:
    reg = CollectorRegistry()
    col = NvmlCollector()
    reg.register(col)
    return reg, col
