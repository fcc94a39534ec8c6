"""What a node-down alert does, and the webhook post that carries it: the steps, in order, with their limits.

An Alertmanager post is checked whole first (alerts.actions: nothing is done for a malformed one). Node-down
alerts then pass the circuit breaker (too many nodes reported down at once is a monitoring problem, not a
reason to drain the cluster). A replica that may not act (not the leader) does nothing. The scheduler's own
view must agree that the node failed (failover.confirm_with_scheduler). Then, per actuator: requeue the
node's jobs, fence the node, tell the tenants; a failing step does not stop the next, but a refused fence
(this replica lost its lease) stops every actuator at once.

Failovers run in their own worker under their own lock: they never wait for a cycle in flight (not even one
with hundreds of preemptions), and the HTTP handler awaits the future without blocking.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from daemon.actuators.base import FencesNodes, ReportsNodeHealth, capable
from daemon.config import FailoverConfig
from daemon.failover import alerts
from daemon.policy.types import Notification
from daemon.text import agree, plural

log = logging.getLogger("gpu_autoscaler.service")


class Failover:
    """Node failover for one daemon.

    `runtime` gives the actuators, the node lists, the store and the metrics (duck-typed: this package does not
    import the service); `config` is read at each post, so a reload applies; `may_act` is the leader lease;
    `trigger_cycle` asks for a cycle at once after a node went down or a load alert came in.
    """

    def __init__(self, runtime: Any, config: Callable[[], FailoverConfig], may_act: Callable[[], bool],
                 trigger_cycle: Callable[[], None]) -> None:
        self.runtime = runtime
        self.config = config
        self.may_act = may_act
        self.trigger_cycle = trigger_cycle
        self.breaker = alerts.Breaker(config())
        self.lock = threading.Lock()
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="failover")

    def close(self) -> None:
        self.worker.shutdown(wait=True)

    def submit(self, payload: alerts.WebhookPayload, received: float) -> Future:
        """Hand a webhook post to the failover worker."""
        return self.worker.submit(self.handle_alerts, payload, received)

    def handle_alerts(self, payload: alerts.WebhookPayload, received: float) -> list[dict]:
        """Check every alert first (alerts.PayloadError: nothing is done), then act on each."""
        fc = self.config()
        rt = self.runtime
        acts = alerts.actions(payload, fc, rt.node_known)
        down = [a.node for a in acts if a.kind == "node_down" and a.node]
        tripped = None
        if down:
            ok, count, lim = self.breaker.admit(down, time.monotonic(), len(rt.known_nodes()))
            rt.metrics.breaker_open.set(0 if ok else 1)
            if not ok:
                tripped = (f"mass node failure reported: monitoring problem? {plural(count, 'node')} reported down "
                           f"within {fc.breaker_window_s:g}s (limit {lim}); no failover until it clears")
                log.error("%s (this post: %s)", tripped, ", ".join(down[:10]))
                if rt.store is not None:
                    rt.store.log_event(dt.datetime.now(dt.timezone.utc).isoformat(), "mass_node_failure",
                                       {"nodes": down, "count": count, "limit": lim})
        stale = [a for a in acts if a.kind == "stale"]
        if stale:  # one line per post, however many alerts it replays
            log.warning("webhook: %d alert(s) older than failover.max_alert_age_s = %gs refused (oldest: %s, %.0fs "
                        "ago); nothing done for them", len(stale), fc.max_alert_age_s,
                        max(stale, key=lambda a: a.age_s).alertname, max(a.age_s for a in stale))
        done: list[dict] = []
        want_cycle = False
        for act in acts:
            kind = "breaker" if act.kind == "node_down" and tripped else act.kind
            # a name the config does not list counts as `other`: posts cannot grow the label set
            rt.metrics.count_alert(act.alertname, kind, (*fc.node_down_alerts, *fc.cycle_alerts))
            if kind == "breaker":
                done.append({"action": "refused", "alert": act.alertname, "node": act.node, "reason": tripped})
            elif kind == "stale":
                done.append({"action": "refused", "alert": act.alertname, "node": act.node,
                             "reason": f"stale: {act.age_s:.0f}s old, over failover.max_alert_age_s"})
            elif act.kind == "node_down" and act.node:
                done.append({"action": "node_down", **self.node_down(act.node, received, act.alertname)})
                want_cycle = True
            elif act.kind == "cycle_now":
                done.append({"action": "cycle_now", "alert": act.alertname})
                want_cycle = True
            else:
                done.append({"action": act.kind, "alert": act.alertname, "node": act.node})
        if want_cycle:
            self.trigger_cycle()
        return done

    def node_down(self, node: str, received: float, alertname: str) -> dict:
        """One node reported down: act, unless this replica may not (checked first: a standby fences nothing)."""
        if not self.may_act():
            log.warning("node %s down (%s): not acting, this replica may not act", node, alertname)
            return {"node": node, "requeued": [], "seconds": 0.0, "errors": [], "skipped": "replica may not act"}
        # failovers are serialised with each other; the simulated cluster guards its own arrays
        with self.lock:
            return self._node_down(node, received, alertname)

    def scheduler_disagrees(self, node: str) -> str | None:
        """Why the scheduler's own view does not back a node-down alert, or None (act on it).

        Asked of every actuator that can tell (ReportsNodeHealth) when failover.confirm_with_scheduler is on:
        one that sees the node down, drained, failing or not responding confirms it; when every one that
        answers sees it healthy, the alert alone moves no job. An actuator that cannot tell (no answer, an
        unknown node) does not count, and when none can, the alert is acted on."""
        if not self.config().confirm_with_scheduler:
            return None
        healthy = []
        for act in capable(self.runtime.actuators, ReportsNodeHealth):
            try:
                seen = act.node_down_confirmed(node)
            except Exception as exc:  # a scheduler that cannot say: no vote
                log.warning("node %s: %s cannot say whether it is down: %s", node, act.name, exc)
                continue
            if seen is True:
                return None
            if seen is False:
                healthy.append(act.name)
        if not healthy:
            return None
        return (f"the scheduler does not see {node} as failed ({', '.join(healthy)}: healthy); no job requeued and "
                "nothing fenced (failover.confirm_with_scheduler)")

    def _node_down(self, node: str, received: float, alertname: str) -> dict:
        rt = self.runtime
        disagree = self.scheduler_disagrees(node)
        if disagree is not None:
            took = time.perf_counter() - received
            log.error("node %s reported down by %s but %s", node, alertname, disagree)
            if rt.store is not None:
                rt.store.log_event(dt.datetime.now(dt.timezone.utc).isoformat(), "node_down_unconfirmed",
                                   {"node": node, "alert": alertname, "reason": disagree})
            return {"node": node, "requeued": [], "seconds": round(took, 4), "errors": [], "skipped": disagree}
        jobs = rt.jobs_on_node(node)
        reason = f"node {node} failed ({alertname}): job requeued on healthy nodes"
        ids = [j for j, _ in jobs]
        per_tenant = Counter(t for _, t in jobs)
        by_tenant: dict[str, list[str]] = {}
        for j, t in jobs:  # the event keeps whose job is whose: a tenant token reads only its own (web/views.py)
            by_tenant.setdefault(t, []).append(j)
        tenants = sorted(per_tenant)
        told = [Notification(t, "node_failed", f"{plural(per_tenant[t], 'job')} of yours on {node} "
                                                f"{agree(per_tenant[t], 'was', 'were')} requeued: {reason}")
                for t in tenants]
        errors: list[str] = []
        fenced = False
        for act in rt.actuators:
            # each step on its own: a requeue that fails still fences the node and tells the tenants; but once
            # the fence refuses (this replica lost its lease), nothing more is sent by any actuator
            steps = [("requeue", lambda a=act: a.requeue(ids, reason) if ids else None)]
            if isinstance(act, FencesNodes):
                steps.append(("fence", lambda a=act: a.fence_node(node, f"{alertname} alert")))
            steps.append(("notify", lambda a=act: a.notify(told)))
            for what, step in steps:
                try:
                    rep = step()
                except Exception as exc:
                    errors.append(f"{act.name}: {what}: {exc}")
                    continue
                if rep is not None:
                    errors.extend(rep.errors)
                    fenced = fenced or getattr(rep, "fenced", False)
                if fenced:
                    break
            if fenced:
                break
        took = time.perf_counter() - received
        rt.metrics.failover_seconds.observe(took)
        if rt.store is not None:
            rt.store.log_event(dt.datetime.now(dt.timezone.utc).isoformat(), "node_down",
                               {"node": node, "jobs": ids, "tenants": tenants, "by_tenant": by_tenant,
                                "seconds": took, "errors": errors})
        log.warning("node %s down: %s requeued in %.3fs%s", node, plural(len(ids), "job"), took,
                    f" (errors: {errors})" if errors else "")
        return {"node": node, "requeued": ids, "seconds": round(took, 4), "errors": errors}
