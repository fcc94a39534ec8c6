"""Policy and rate-limit benchmark.

1. plan() for 1,000 tenants / 100,000 GPUs / 50,000 jobs (target < 10 ms), with a forecast that forces
   preemptions so the expensive path runs.
2. Redis token-bucket decisions per second on loopback: our Lua bucket vs the `limits` library
   (moving window and fixed window on the same Redis), one client and four threads. A redis-server is
   started on a free loopback port for the run and stopped after.

    python bench/policy_bench.py [--out bench/out/policy.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.policy import PolicyMemory, plan  # noqa: E402
from daemon.policy.state import PRIORITY, ClusterState, Jobs  # noqa: E402
from forecaster.types import Forecast  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import provenance  # noqa: E402  (bench/, next to this script)
import targets  # noqa: E402


def big_state(n_tenants=1000, gpus=100_000, n_jobs=50_000, seed=0):
    rng = np.random.default_rng(seed)
    tiers = tuple("high" if i < n_tenants // 10 else ("low" if i % 2 else "normal") for i in range(n_tenants))
    tenant = rng.integers(0, n_tenants, n_jobs)
    size = rng.choice([1, 2, 4, 8], n_jobs, p=[0.4, 0.3, 0.2, 0.1])
    # scale sizes so the running jobs fill ~92% of the cluster
    running = rng.uniform(size=n_jobs) < 0.9
    scale = 0.92 * gpus / size[running].sum()
    size = np.maximum(1, np.round(size * scale)).astype(np.int64)
    prio = np.array([PRIORITY[tiers[t]] for t in tenant], dtype=np.int8)
    jobs = Jobs(np.array([f"job-{i}" for i in range(n_jobs)], dtype=object), tenant, size, prio, running,
                np.where(running, rng.uniform(0, 86400, n_jobs), 0.0),
                np.where(~running, rng.uniform(0, 9000, n_jobs), 0.0),
                np.array([f"node-{i % (gpus // 8)}" for i in range(n_jobs)], dtype=object))
    used = np.bincount(tenant[running], weights=size[running], minlength=n_tenants)
    pend = np.bincount(tenant[~running], weights=size[~running], minlength=n_tenants)
    st = ClusterState(pd.Timestamp("2026-01-06T13:50:00Z"), tuple(f"tenant-{i:04d}" for i in range(n_tenants)), tiers,
                      gpus, used, pend, jobs)
    fc_vals = np.repeat(((used + pend) * 1.3)[:, None, None], 60, axis=1)
    fc = Forecast(st.tenants, (0.5, 0.9, 0.99), np.concatenate([fc_vals, fc_vals * 1.1, fc_vals * 1.2], axis=2),
                  st.at, 60, "bench")
    return st, fc


def bench_plan(repeats=50) -> dict:
    st, fc = big_state()
    cfg = Config()
    mem = PolicyMemory()
    p = plan(fc, st, mem, cfg)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = plan(fc, st, mem, cfg)
        times.append(time.perf_counter() - t0)
    return {"tenants": len(st.tenants), "gpus": st.capacity, "jobs": len(st.jobs), "preemptions": len(p.preemptions),
            "reserved_gpus": int(sum(p.reservations.values())), "median_ms": float(np.median(times) * 1000),
            "p95_ms": float(np.percentile(times, 95) * 1000)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_redis(seconds=2.0, threads=4) -> dict:
    exe = shutil.which("redis-server")
    if exe is None:
        return {"error": "redis-server not installed (make services)"}
    import redis
    from limits import RateLimitItemPerSecond
    from limits.storage import RedisStorage
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    from gateway.bucket import TokenBucket

    port = free_port()
    d = tempfile.mkdtemp()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", d],
                            stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)

        def ours():
            tb = TokenBucket(redis.Redis.from_url(url), default_rate=1e9, default_burst=1e9)
            return lambda i: tb.acquire(f"tenant-{i % 1000}").allowed

        def limits_moving():
            lim = MovingWindowRateLimiter(RedisStorage(url))
            item = RateLimitItemPerSecond(10**9)
            return lambda i: lim.hit(item, f"tenant-{i % 1000}")

        def limits_fixed():
            lim = FixedWindowRateLimiter(RedisStorage(url))
            item = RateLimitItemPerSecond(10**9)
            return lambda i: lim.hit(item, f"tenant-{i % 1000}")

        out = {}
        for name, make in (("lua_token_bucket", ours), ("limits_moving_window", limits_moving),
                           ("limits_fixed_window", limits_fixed)):
            redis.Redis.from_url(url).flushdb()  # each limiter starts from an empty Redis
            row = {}
            for n in (1, threads):
                counts = [0] * n
                stop = time.perf_counter() + seconds

                def work(k, make=make, stop=stop, counts=counts):
                    f = make()
                    i = 0
                    while time.perf_counter() < stop:
                        f(i)
                        i += 1
                    counts[k] = i

                ts = [threading.Thread(target=work, args=(k,)) for k in range(n)]
                t0 = time.perf_counter()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                row[f"{n}_clients_per_s"] = sum(counts) / (time.perf_counter() - t0)
            out[name] = row
        return out
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/out/policy.json"))
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    res = provenance.started()
    res.update({"plan": bench_plan(), "redis": bench_redis(a.seconds), "targets": targets.POLICY})
    provenance.finished(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    p = res["plan"]
    print(f"plan(): {p['tenants']} tenants, {p['gpus']} GPUs, {p['jobs']} jobs, {p['preemptions']} preemptions")
    print(f"  median {p['median_ms']:.2f} ms, p95 {p['p95_ms']:.2f} ms (target < 10 ms)")
    r = res["redis"]
    if "error" in r:
        print(f"redis: {r['error']}")
    else:
        base = r["limits_moving_window"]["1_clients_per_s"]
        print(f"\n{'limiter on loopback Redis':<26} {'1 client/s':>12} {'4 clients/s':>12} {'vs limits moving':>17}")
        for name, row in r.items():
            print(f"{name:<26} {row['1_clients_per_s']:>12.0f} {row['4_clients_per_s']:>12.0f} "
                  f"{row['1_clients_per_s'] / base:>16.2f}x")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
