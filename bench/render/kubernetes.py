"""Renderer for docs/kubernetes.md: the Kubernetes scale bench against the real control plane."""

from __future__ import annotations

from bench.render.common import block, goal, load, met, ms, n, source, table, verdict


@block("k8s-scale")
def k8s_scale() -> str:
    """bench/k8s_scale_bench.py: the daemon's Kubernetes view and cycle on the real control plane."""
    d = load("k8s_scale.json")
    i, c, v, tg = d["input"], d["cluster"], d["daemon"], d["targets"]
    per = i["gpu_pods_per_node"] + i["cpu_pods_per_node"]
    steady = v["cycles"][1:] or v["cycles"]
    reqs = sorted({k for cy in steady for k in cy["requests"]})
    first = v["cycles"][0]["requests"]
    api = ", ".join(f"{k}: {n(x)}" for k, x in v["apiserver_during_cycles"].items()) or "none"
    p95, relist = tg["cycle_p95_2s"], tg["no_relist"]
    rows = [["view: first list and watch of pods and nodes", f"{v['view_initial_list_watch_s']:.1f} s", "-"],
            ["one snapshot (both kinds)", f"{v['snapshot_ms']:.2f} ms", "-"],
            ["first cycle (writes the Kueue objects, holds nodes)", ms(v["first_cycle_ms"]), "-"],
            [f"cycle p50 / p95 / max, {len(steady)} steady cycles",
             f"{ms(v['cycle_p50_ms'])} / {ms(v['cycle_p95_ms'])} / {ms(v['cycle_max_ms'])}",
             f"p95 {goal(p95)}: {verdict(met(p95, d))}"],
            ["of which reads / plan / act (p50)",
             f"{ms(v['read_p50_ms'])} / {ms(v['plan_p50_ms'])} / {ms(v['act_p50_ms'])}", "-"],
            ["full lists of pods or nodes in the cycles (the daemon's client)", n(v["full_lists_in_cycles"]),
             f"{goal(relist)}: {verdict(met(relist, d))}"],
            ["requests per steady cycle, most (the daemon's client)", n(v["requests_per_steady_cycle_max"]), "-"],
            ["a new pod in the view's snapshot after its create is answered, median (of "
             f"{len(v['watch_lag_ms'])})", f"{sorted(v['watch_lag_ms'])[len(v['watch_lag_ms']) // 2]:.1f} ms", "-"],
            ["daemon RSS: before the view / with it / peak",
             f"{v['rss_mib_before_view']:,.0f} / {v['rss_mib_after_view']:,.0f} / {v['rss_mib_peak']:,.0f} MiB", "-"]]
    out = [f"{n(i['nodes'])} KWOK nodes of {i['gpus_per_node']} GPUs ({', '.join(m.upper() for m in i['models'])}, "
           f"round robin) and {n(i['pods'])} pods over {i['tenants']} tenant namespaces ({per} a node: "
           f"{i['gpu_pods_per_node']} of 1 GPU, {i['cpu_pods_per_node']} CPU-only), bound at creation. Made with "
           f"parallel requests: nodes in {c['nodes_create_s']:.0f} s, pods in {c['pods_create_s']:.0f} s, all "
           f"Running {c['pods_running_after_create_s']:.0f} s after that ({n(c['pods_not_running'])} not). "
           f"The view held {n(v['view_pods'])} pods and {n(v['view_nodes'])} nodes.",
           "", table(["what", "measured", "goal"], rows), "",
           f"The first cycle's requests: {', '.join(f'{k} {x}' for k, x in sorted(first.items()))}. Steady cycles' "
           f"requests: {', '.join(reqs) or 'none (the plan did not change, so there was nothing to write)'}. "
           f"The apiserver's own count of LISTs and WATCHes of pods and nodes during the cycles (a watch counts when "
           f"it ends): {api}. The view listed once in all ({', '.join(f'{k} {x}' for k, x in v['view_lists'].items())}"
           f"), in {', '.join(f'{n(x)} pages of {k[5:]}' for k, x in v['apiserver_lists_view_start'].items())}. "
           f"The plan held {n(v['cycles'][0]['reserved_gpus'])} GPUs (no forecast: reactive holds) and preempted "
           f"{n(sum(cy['preemptions'] for cy in v['cycles']))} pods. The load average was "
           f"{d['load_average_1min_before_daemon']:.1f} when the daemon's side started, on this shared "
           f"{d['cpus']}-core box that runs the control plane too.",
           "", source(["k8s_scale.json"], d)]
    return "\n".join(out)
