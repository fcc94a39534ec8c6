"""The long-running daemon: one thread paces the cycles, APScheduler runs the retrain and the watchdog,
uvicorn serves HTTP, systemd is told.

Cycles never overlap (one cycle thread plus the runner's lock, since an alert
can also start one) and are paced on the monotonic clock, so a wall-clock step
neither stalls nor bunches them; a late cycle is coalesced rather than run
twice, and the systemd watchdog is only fed while cycles actually complete.
Node failover runs in its own worker under its own lock and never waits for a cycle.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import threading
import time
from concurrent.futures import Future
from typing import Callable

import sdnotify
import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from daemon.actuators.base import HoldsCapacity, KeepsClusterView
from daemon.config import Config, ConfigError
from daemon.failover import alerts
from daemon.failover.handler import Failover
from daemon.service.backend import DaemonBackend
from daemon.service.cycle import CycleResult
from daemon.service.wiring import Runtime, limit_torch_threads
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.service")
reload_log = logging.getLogger("gpu_autoscaler.reload")


def summary_line(res: CycleResult, simulated: bool = False) -> str:
    """One line per cycle for a person watching the terminal or the journal.

    ``simulated``: the snapshot's time is the simulator's, not the clock's; it is labelled (``sim
    2026-01-12T13:30``) so that it is not read as the wall-clock time the log lines beside it carry."""
    p = res.plan
    if p is None:
        return f"cycle {res.outcome}: {res.error or 'no plan'}"
    s = p.summary()
    load = f"{s['load']:.1%}" if s["load"] is not None else "?"
    head = ("STALE " if res.outcome != "ok" else "") + ("STANDBY " if not res.acted else "")
    at = f"sim {p.at[:16]}" if simulated else p.at
    cap = "?" if p.stale and not p.capacity else p.capacity   # no snapshot yet: the size is unknown, not 0
    return (f"{head}{at} load={load} cap={cap} reserved={s['reserved']} "
            f"({plural(s['reserved_tenants'], 'tenant')}) preempt={s['preemptions']}/{s['preempted_gpus']}gpu "
            f"level={s['rate_level']} model={p.forecast_model} {res.seconds * 1000:.0f}ms"
            + (f" | {'; '.join(p.notes)}" if p.notes else ""))


# why a stop keeps the holds when the lease's store cannot say whether another replica is alive (a WARNING)
UNSURE_OF_PEERS = "HA: cannot tell"


class StartError(RuntimeError):
    """The daemon cannot start as configured (its HTTP port, say); the process exits with the reason."""


class Fatal(RuntimeError):
    """The daemon stopped because it could no longer plan (its cycle thread died); the process exits 1."""


class Daemon:
    def __init__(self, runtime: Runtime, *, on_cycle: Callable[[CycleResult], None] | None = None,
                 max_cycles: int | None = None, serve_http: bool | None = None) -> None:
        self.runtime = runtime
        self.on_cycle = on_cycle
        self.max_cycles = max_cycles
        self.serve_http = self.cfg.server.enabled if serve_http is None else serve_http
        self.notifier = sdnotify.SystemdNotifier()
        self.scheduler = BackgroundScheduler(timezone=dt.timezone.utc)
        self.stopped = threading.Event()
        self.server: uvicorn.Server | None = None
        self.last_ok_cycle: float | None = None
        self.last_result: CycleResult | None = None
        self.cycles_done = 0
        self.ready = False
        self._manifest_mtime: float | None = self._manifest_stamp()
        self.fail_nodes: dict[int, str] = {}
        self.config_path = None  # the file SIGHUP re-reads (set by the CLI)
        self._reload_wanted = threading.Event()
        self._cycle_now = threading.Event()
        self._cycle_thread: threading.Thread | None = None
        self.fatal: str | None = None  # why the process must stop (the cycle thread died); run_forever raises it
        # failover runs in its own worker under its own lock: it never waits for a cycle (nor blocks HTTP)
        self.failover = Failover(runtime, lambda: self.cfg.failover, self.may_act, self.trigger_cycle)
        # what the web layer reads (daemon/web/backend.py): the published snapshot and a few calls, not this object
        self.backend = DaemonBackend(runtime, lambda detail=False: self.health(detail),
                                     lambda p, at: self.submit_alerts(p, at))

    @property
    def cfg(self) -> Config:
        """The config in force; one reference, held by the cycle runner and replaced only by `use_config`."""
        return self.runtime.runner.cfg

    def use_config(self, cfg: Config) -> None:
        """Swap `cfg` in: the one place a running daemon's config changes (a reload, daemon/config/reload.py).

        Under the runner's lock, so between cycles: a cycle runs on one config from start to end, and the
        snapshot it publishes names the config it ran with. Daemon.cfg and Runtime.cfg read the runner's
        reference, so there is nothing else to keep in step. HTTP handlers read it per request (tokens).
        """
        with self.runtime.runner.lock:
            note = self.runtime.runner.use_config(cfg)
        if note is not None:
            reload_log.warning("%s", note)

    def may_act(self) -> bool:
        """Whether this replica may change the cluster (the leader lease hooks in here). Checked first on the
        node-down path: a replica that may not act fences nothing and requeues nothing."""
        lease = self.runtime.lease
        return lease is None or lease.is_leader()

    def _simulate_node_failure(self, node: str) -> None:
        """Embedded simulator only: a node dies and the daemon reacts as if Alertmanager had said so."""
        sim = self.runtime.sim
        idx = sim.node_index(node) if sim is not None else None
        if idx is None:
            log.error("cannot fail %s: not a simulated node", node)
            return
        with sim.lock:
            sim.cluster.fail_node(idx, requeue=False)
        log.warning("simulated failure of %s", node)
        self.handle_node_down(node, time.perf_counter(), "SimulatedNodeDown")

    def watchdog(self) -> None:
        """Between cycles: feed systemd's watchdog while the daemon's loop keeps completing cycles (degraded too)."""
        if self.health()["status"] != "unhealthy":
            self.notifier.notify("WATCHDOG=1")

    # ---- jobs --------------------------------------------------------------------------------
    def _manifest_stamp(self) -> float | None:
        try:
            return (self.cfg.forecaster.model_dir / "manifest.json").stat().st_mtime
        except OSError:
            return None

    def _reload_model_if_changed(self) -> None:
        """A retrain (timer or command) promotes by rewriting the manifest; pick the new model up."""
        stamp = self._manifest_stamp()
        if stamp == self._manifest_mtime:
            return
        self._manifest_mtime = stamp
        if stamp is None:
            return
        from daemon.forecasting.choose import build

        try:
            runner = self.runtime.runner
            runner.forecaster, runner.forecaster_note = build(self.cfg)  # published with the next cycle
            runner.quality.reset(keep_fallback=False)  # a new model is scored from scratch
            log.info("model manifest changed: now using %s", runner.forecaster_note)
        except Exception as exc:
            log.error("model manifest changed but the new model cannot be used (%s); keeping the old one", exc)

    def cycle(self) -> None:
        # torch's thread count is per thread (forecaster/threads.py): set where the forecast runs, the cycles' thread
        # (or an alert's), not only where the runtime was built; a retrain's widening does not reach it either
        limit_torch_threads(self.cfg.forecaster.torch_threads)
        self._reload_model_if_changed()
        if self.cycles_done in self.fail_nodes:
            self._simulate_node_failure(self.fail_nodes[self.cycles_done])
        try:
            res = self.runtime.runner.run_once()
        except Exception:
            log.exception("cycle crashed; keeping the last good plan")
            self.runtime.metrics.cycles.labels("error").inc()
            return
        self.last_result = res
        self.cycles_done += 1
        # the watchdog follows the daemon's own loop: a cycle that ran to its end, even one that found the
        # source down and kept (or relaxed) its plan, is a live daemon; systemd restarting it would not help
        self.last_ok_cycle = time.monotonic()
        self.notifier.notify("WATCHDOG=1")
        if not self.ready:
            self.ready = True
            self.notifier.notify("READY=1")
        self.runtime.metrics.breaker_open.set(1 if self.failover.breaker.is_open(time.monotonic()) else 0)
        self.notifier.notify(f"STATUS={summary_line(res, self.cfg.source.kind == 'simulator')[:200]}")
        if self.on_cycle:
            self.on_cycle(res)
        if self.max_cycles is not None and self.cycles_done >= self.max_cycles:
            self.stopped.set()

    def retrain(self) -> None:
        from daemon.forecasting.retrain import retrain_from_config

        try:
            out = retrain_from_config(self.cfg, source=self.runtime.source, progress=False)
            log.info("scheduled retrain: %s", out.message)  # a promotion is picked up by the next cycle
        except Exception:
            log.exception("scheduled retrain failed; the current model stays")
        finally:
            limit_torch_threads(self.cfg.forecaster.torch_threads)  # training widens torch's pool for itself

    def trigger_cycle(self) -> None:
        """Run a cycle now (an alert asked for it); coalesces with a scheduled one."""
        if self._cycle_thread is not None and self._cycle_thread.is_alive():
            self._cycle_now.set()
        else:
            threading.Thread(target=self.cycle, daemon=True).start()

    def _cycle_loop(self) -> None:
        """The cycles' thread. Should it ever die, the process stops with the reason (exit status 1, so the
        service manager restarts it): a live process that plans nothing would look healthy to everyone."""
        try:
            self._cycles()
        except BaseException as exc:
            self.fatal = f"the cycle thread died: {type(exc).__name__}: {exc}"
            log.critical("%s; stopping the daemon (exit status 1) so that it is restarted", self.fatal,
                         exc_info=True)
            self.stopped.set()

    def _cycles(self) -> None:
        """Cycles paced on the monotonic clock, one at a time: a wall-clock step (NTP, a resumed VM) neither
        stalls them (a wall-clock scheduler waits out a step back) nor bunches them; a late cycle is coalesced."""
        interval = self.cfg.cycle.interval_s
        next_at = time.monotonic()
        while not self.stopped.is_set():
            delay = next_at - time.monotonic()
            if delay > 0:
                self._cycle_now.wait(delay)
            if self.stopped.is_set():
                break
            self._cycle_now.clear()
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:
                log.exception("cycle loop: unexpected error; the loop goes on")
            next_at = started + interval

    # ---- alerts (daemon/failover/handler.py does the work) ------------------------------------
    def handle_node_down(self, node: str, received: float, alertname: str) -> dict:
        return self.failover.node_down(node, received, alertname)

    def _scheduler_disagrees(self, node: str) -> str | None:
        return self.failover.scheduler_disagrees(node)

    def submit_alerts(self, payload: alerts.WebhookPayload, received: float) -> Future:
        """Hand a webhook post to the failover worker; the HTTP handler awaits the future without blocking."""
        return self.failover.submit(payload, received)

    def handle_alerts(self, payload: alerts.WebhookPayload, received: float) -> list[dict]:
        return self.failover.handle_alerts(payload, received)

    # ---- health ------------------------------------------------------------------------------
    def health(self, detail: bool = False) -> dict:
        """ok | degraded (alive, with the reason) | unhealthy (the loop has not completed a cycle lately).

        Without `detail` (the open /healthz, a tenant's pages) a source error and a dead cycle thread are said
        without their text: a scheduler's error may quote its output (a malformed squeue line names an account and
        a job), and /healthz answers anyone. The text is in the log (one line, when it happened) and, with
        `detail`, on the operator's views."""
        interval = self.cfg.cycle.interval_s
        now = time.monotonic()
        age = None if self.last_ok_cycle is None else now - self.last_ok_cycle
        runner = self.runtime.runner
        plan = runner.last_plan
        res = self.last_result
        reasons = []
        if res is not None and res.outcome == "source_error":
            reasons.append(f"source unavailable: {res.error}" if detail else
                           "source unavailable (the error is in the daemon's log and on the operator's console)")
        elif res is not None and res.outcome == "stale" and res.plan is not None and res.plan.notes:
            reasons.append(res.plan.notes[0])
        if runner.safe_active:
            reasons.append(("no good plan yet" if runner.last_plan is None else
                            f"last good plan older than {self.cfg.cycle.max_plan_age_s:g}s")
                           + ": safe default in force (no holds beyond the static pool, no preemptions)")
        if self.failover.breaker.is_open(now):
            reasons.append("failover circuit breaker open: mass node failure reported, monitoring problem?")
        ov = self.runtime.overrides
        ov_problem = ov.problem(detail) if ov is not None else None   # a malformed store's text names tenants
        if ov_problem:
            reasons.append(ov_problem)  # the shared store (HA) is unreadable: planning with the last overrides read
        alive = age is not None and age < max(3 * interval, 10)
        if self.fatal is not None or (self._cycle_thread is not None and not self._cycle_thread.is_alive()
                                      and not self.stopped.is_set()):
            alive = False
            if self.fatal is not None and not detail:
                reasons.insert(0, "the cycle thread died (the error is in the daemon's log)")
            else:
                reasons.insert(0, self.fatal or "the cycle thread is not running")
        status = "unhealthy" if not alive else ("degraded" if reasons else "ok")
        plan_age = runner.plan_age_s()
        return {"status": status, "reason": "; ".join(reasons) or None, "last_cycle_age_s": age,
                "plan_stale": bool(res and res.outcome != "ok"), "safe_default": runner.safe_active,
                "plan_age_s": None if plan_age == float("inf") else round(plan_age, 1),
                "plan_at": plan.at if plan else None, "cycles": self.cycles_done,
                "forecaster": self.runtime.forecaster_note, "role": self.role(),
                **({"overrides": ov.status(detail)} if ov is not None and ov.shared is not None else {})}

    def role(self) -> str:
        """single (no HA), leader (holds the lease: acts) or standby (plans, never acts or fails over)."""
        return "single" if self.runtime.lease is None else ("leader" if self.may_act() else "standby")

    def reload(self) -> bool:
        """Re-read the config file (SIGHUP); a bad one keeps the running config, says why in one log line and
        counts it in `gpuas_config_reloads_total{outcome="error"}`. Reading, validating and merging is
        daemon/config/reload.py; the token files are checked here (the web layer reads them); `use_config`
        swaps the result in."""
        from daemon.config.reload import reread
        from daemon.web.auth import Access

        m = self.runtime.metrics
        self.notifier.notify("RELOADING=1")
        try:
            if self.config_path is None:
                reload_log.error("config reload: the daemon runs without a config file; nothing to re-read")
                m.config_reloads.labels("error").inc()
                return False
            try:
                cfg, kept = reread(self.config_path, self.cfg)
                Access(cfg.access)  # token files must be readable
            except ConfigError as exc:
                reload_log.error("config reload failed, keeping the running config: %s", exc)
                m.config_reloads.labels("error").inc()
                m.config_reload_ok.set(0)
                return False
            self.use_config(cfg)
            m.config_reloads.labels("ok").inc()
            m.config_reload_ok.set(1)
            reload_log.info("config reloaded from %s%s", self.config_path,
                            f"; changed but kept until a restart: {', '.join(kept)}" if kept else "")
            return True
        finally:
            self.notifier.notify("READY=1")

    # ---- lifecycle ---------------------------------------------------------------------------
    def _start_http(self) -> None:
        from daemon.web.app import build_app

        s = self.cfg.server
        config = uvicorn.Config(build_app(self.backend), host=s.host, port=s.port, log_level="warning",
                                access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # signals belong to the main thread's handler
        thread = threading.Thread(target=self.server.run, name="http", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.server.started:
            # uvicorn logs the cause (the port in use, an address not on this host) and ends its thread; a
            # daemon that says it serves /healthz and /alerts when it does not would hide a dead failover path
            self.server.should_exit = True
            raise StartError(f"cannot serve HTTP on {s.host}:{s.port} (server.host/server.port; uvicorn's "
                               "error is logged above)")
        log.info("serving /metrics, /healthz, /alerts on http://%s:%d", s.host, s.port)

    def start(self) -> None:
        wd_usec = os.environ.get("WATCHDOG_USEC")
        if wd_usec and wd_usec.isdigit():
            self.scheduler.add_job(self.watchdog, "interval", seconds=max(1.0, int(wd_usec) / 2e6), id="watchdog",
                                   max_instances=1, coalesce=True)
        if self.cfg.retrain.enabled:
            self.scheduler.add_job(self.retrain, CronTrigger.from_crontab(self.cfg.retrain.cron, timezone="UTC"),
                                   id="retrain", max_instances=1, coalesce=True, misfire_grace_time=3600)
        if self.serve_http:
            self._start_http()
        lease = self.runtime.lease
        if lease is not None:
            lease.on_elected = lambda token: self.trigger_cycle()  # act at once, not at the next interval
            lease.tick()  # know the role before the first cycle
            lease.run()
        for act in self.runtime.actuators:
            if isinstance(act, KeepsClusterView):
                act.start_view()  # the watches list now, so the first cycle finds the view ready
        self.scheduler.start()
        self._cycle_thread = threading.Thread(target=self._cycle_loop, name="cycles", daemon=True)
        self._cycle_thread.start()

    def stop(self) -> None:
        self.notifier.notify("STOPPING=1")
        self.stopped.set()
        self._cycle_now.set()
        if self._cycle_thread is not None and self._cycle_thread is not threading.current_thread():
            self._cycle_thread.join()  # the cycle in flight finishes
        try:
            self.scheduler.shutdown(wait=True)
        except Exception:
            pass
        if self.server is not None:
            self.server.should_exit = True
        self.failover.close()
        release, why = self.release_on_stop()
        if self.cfg.actuators.release_holds_on_stop:
            # a clean stop is routine (INFO); only holds kept for not knowing whether another replica is alive
            # are worth a WARNING
            (log.warning if why.startswith(UNSURE_OF_PEERS) else log.info)(
                "stopping: %s scheduler holds: %s", "releasing" if release else "keeping", why)
        if release:
            self.release_holds()
        if self.runtime.lease is not None:
            self.runtime.lease.stop(release=True)  # a clean stop hands over at once, not after a TTL
        self.runtime.close()

    def release_on_stop(self) -> tuple[bool, str]:
        """Whether a clean stop releases the scheduler's holds, and why.

        Only the acting replica's holds exist. Under HA a leader's stop is usually a rolling restart: another
        replica takes the lease within a TTL and keeps holding, so releasing would free every held node for
        backfill in between. So under HA the holds go only when this is known to be the last replica (no
        other replica's liveness beat in the lease backend); when that cannot be asked, they stay.
        """
        if not self.cfg.actuators.release_holds_on_stop:
            return False, "actuators.release_holds_on_stop is off"
        if not self.may_act():
            return False, "this replica is a standby; the holds are the leader's"
        lease = self.runtime.lease
        if lease is None:
            return True, "single replica (no HA)"
        try:
            peers = lease.peers()
        except lease.transient as exc:
            return False, (f"{UNSURE_OF_PEERS} from {lease.store} whether another replica is alive ({exc}); "
                           "kept for whichever replica leads next")
        if peers:
            return False, f"HA: replica {', '.join(peers)} is alive and takes the lease over"
        return True, "HA: no other replica is alive, this is the last one"

    def release_holds(self) -> None:
        """Stopping: holds on the scheduler go with the daemon (the jobs in them keep running)."""
        for act in self.runtime.actuators:
            if not isinstance(act, HoldsCapacity):
                continue
            try:
                rep = act.release_holds()
            except Exception as exc:
                log.error("releasing holds of %s failed: %s", act.name, exc)
                continue
            for a in rep.actions:   # a dry run released nothing: it says what it would have
                log.info("dry run: %s would: %s" if rep.dry_run else "%s: %s", act.name, a)
            if rep.errors:
                log.error("releasing holds of %s: %s", act.name, "; ".join(rep.errors))

    def run_forever(self) -> None:
        def _sig(signum, _frame):
            log.info("signal %d: stopping after the cycle in flight", signum)
            self.stopped.set()

        signal.signal(signal.SIGTERM, _sig)
        signal.signal(signal.SIGINT, _sig)
        signal.signal(signal.SIGHUP, lambda *_: self._reload_wanted.set())
        try:
            self.start()
        except StartError:
            # nothing was started that acts (HTTP comes before the lease, the scheduler and the cycles), and a
            # full stop would release holds: not a failed second instance's to release
            self.runtime.close()
            raise
        try:
            while not self.stopped.wait(0.5):
                if self._reload_wanted.is_set():
                    self._reload_wanted.clear()
                    self.reload()
        finally:
            self.stop()
        if self.fatal is not None:
            raise Fatal(self.fatal)
