"""Leader takeover after `kill -9`, repeated: two `gpu-autoscaler run` replicas on the embedded simulator,
one real redis-server for the lease and the ledger.

Each round kills the leader with SIGKILL while it cycles, measures the time from the kill to the standby's
first act (the ledger entry's Redis TIME), and restarts the killed replica, which then stands by. Reported
per round and as min / median / max, with the cycle interval and the lease TTL.

    nice -n 10 python bench/ha_bench.py [--rounds 5] [--interval 2] [--ttl 1] [--out bench/out/ha-takeover.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import targets  # noqa: E402  (bench/, next to this script)

from tests.integration.test_ha_redis import Replica, _config, _entries  # noqa: E402
from tests.support.services import redis_server, wait_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--ttl", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("bench/out/ha-takeover.json"))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpuas-ha-bench-"))
    rows = []
    with redis_server(tmp) as (url, _):
        r = redis.Redis.from_url(url)
        cfgs = {n: _config(tmp, n, url, a.interval, a.ttl) for n in ("r1", "r2")}
        reps = {"r1": Replica(tmp, "r1", cfgs["r1"])}
        try:
            wait_for(lambda: any(e["holder"] == "r1" for e in _entries(r)), timeout=120, what="r1 acting")
            reps["r2"] = Replica(tmp, "r2", cfgs["r2"])
            wait_for(lambda: reps["r2"].text().count("STANDBY ") >= 2, timeout=120, what="r2 standing by")
            leader, standby = "r1", "r2"
            for i in range(a.rounds):
                time.sleep(a.interval * 1.5)                   # a few cycles into the term
                t_kill = time.time()
                reps[leader].proc.send_signal(signal.SIGKILL)
                reps[leader].proc.wait()
                wait_for(lambda: any(e["holder"] == standby and e["at"] > t_kill for e in _entries(r)), timeout=60,
                         what=f"{standby} taking over")
                first = next(e for e in _entries(r) if e["holder"] == standby and e["at"] > t_kill)
                rows.append({"round": i + 1, "killed": leader, "took_over": standby, "token": first["token"],
                             "takeover_s": round(first["at"] - t_kill, 3)})
                print(f"round {i + 1}: killed {leader}, {standby} acted {rows[-1]['takeover_s']:.2f} s later "
                      f"(token {first['token']})", flush=True)
                reps[leader].close()
                reps[leader] = Replica(tmp, leader, cfgs[leader])
                wait_for(lambda: reps[leader].text().count("STANDBY ") >= 2, timeout=120, what=f"{leader} standby")
                leader, standby = standby, leader
        finally:
            for rep in reps.values():
                rep.close()
    t = [x["takeover_s"] for x in rows]
    summary = {"interval_s": a.interval, "lease_ttl_s": a.ttl, "rounds": rows, "min_s": min(t),
               "median_s": statistics.median(t), "max_s": max(t),
               "within_two_intervals": sum(x < 2 * a.interval for x in t), "targets": targets.ha(a.interval)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"| rounds | interval | lease TTL | takeover min | median | max | within 2 intervals |\n"
          f"| --- | --- | --- | --- | --- | --- | --- |\n"
          f"| {len(t)} | {a.interval:g} s | {a.ttl:g} s | {min(t):.2f} s | {statistics.median(t):.2f} s | "
          f"{max(t):.2f} s | {summary['within_two_intervals']}/{len(t)} |")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
