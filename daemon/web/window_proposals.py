"""Windows proposed from the history (issue 39, item 2), for the API (GET /api/v1/windows/proposals, operators
only) and the console's windows page: computed on request in a worker of their own, never on the cycle's path, and
kept for an hour (the history moves on) (or the windows in force changed).

The history is the daemon's rolling history store (daemon/sources/history.py, ``history.path``), read read-only;
the Prometheus source and the embedded simulator write it every cycle (daemon/service/wiring.py).
Each proposal (daemon/forecasting/windows_proposed.py) comes with its evidence: the days the peak came and, from a
replay of the store's last days (daemon/sim/windows_evidence.py, the cluster and tenants of the config), the
tenant's unmet GPU-minutes without and with the proposed windows and the GPU-minutes their holds left idle. Nothing
is acted on: an operator accepts one by declaring it (PUT /api/v1/windows/{name} with its ``window``, or the
console's accept button, both through windows_api.change, audited).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable

import pandas as pd

from daemon.config import Config
from daemon.forecasting.windows_proposed import DAYS, MIN_DAYS, SIGNIFICANCE, propose, store_steps

log = logging.getLogger("gpu_autoscaler.http")

REFRESH = pd.Timedelta(hours=1)


def _iso(at) -> str:
    """A time as ISO 8601 (2026-01-12T14:05:00+00:00), as computed_at and every other time the API gives; str() of a
    pandas Timestamp put a space where the T goes."""
    return at.isoformat() if hasattr(at, "isoformat") else str(at)


def read_store(cfg: Config) -> pd.DataFrame | None:
    """The daemon's history store as time x series, None when there is none yet."""
    from daemon.sim.own import history_store_path, read_history_store

    return read_history_store(history_store_path(cfg), cfg.cycle.resolution_s)


def compute(frame: pd.DataFrame | None, cfg: Config, declared: list[dict], timezone: str) -> dict[str, Any]:
    """The proposals for `frame` (a tenant with a window declared gets none) with their replayed evidence."""
    base = {"significance": SIGNIFICANCE.format(min_strength=0.2, noise_sds=2.0, min_days=MIN_DAYS, days=DAYS,
                                                pre=2.0), "timezone": timezone,
            "computed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if frame is None or frame.empty:
        return {**base, "status": "no history", "proposals": [],
                "why": "the history store holds no demand yet (history.path; the source writes it every cycle)"}
    span_days = len(frame) * cfg.cycle.resolution_s / 86400
    if span_days < MIN_DAYS:   # no peak can have come on MIN_DAYS days: say so, not "no recurring peak"
        return {**base, "status": "ready", "history_end": _iso(frame.index[-1]), "proposals": [],
                "why": f"the history holds {span_days:.1f} days: a peak is proposed when it came on {MIN_DAYS} of "
                       f"the last {DAYS} days, so {MIN_DAYS} days at least are needed (history.keep_steps = "
                       f"{store_steps(cfg)} keeps the {DAYS} days and the day before them the evidence replays)"}
    known = {t.name for t in cfg.tenants}
    from daemon.policy.fleet import split_series

    cols = [c for c in frame.columns if not known or split_series(str(c))[0] in known]
    props = propose(frame[cols], timezone=timezone, days=DAYS, min_days=MIN_DAYS,
                    exclude=tuple(w["tenant"] for w in declared))
    out = [p.as_dict() for p in props]
    note = None
    if props:
        note = _evidence(frame, cfg, declared, out)
    return {**base, "status": "ready", "history_end": _iso(frame.index[-1]), "proposals": out,
            **({"evidence_note": note} if note else {})}


def _evidence(frame: pd.DataFrame, cfg: Config, declared: list[dict], out: list[dict]) -> str | None:
    """Fill each proposal's ``evidence`` from the replay of the store's last days; a line when it cannot."""
    from daemon.forecasting.retrain import DataError
    from daemon.sim.own import own_workload
    from daemon.sim.windows_evidence import evidence

    step_s = cfg.cycle.resolution_s
    days = min(float(DAYS), len(frame) * step_s / 86400 - cfg.forecaster.season_steps * step_s / 86400)
    if days <= 0:
        return "the history is too short to replay: evidence needs a season before the replayed days"
    try:
        # a tenant the config does not name is replayed as the daemon treats it: tier normal
        named = {t.name for t in cfg.tenants}
        from daemon.policy.fleet import split_series

        unnamed = {split_series(str(c))[0]: "normal" for c in frame.columns if split_series(str(c))[0] not in named}
        w, _ = own_workload(frame, cfg, days=days, step_s=step_s, where="the history store", tier_flags=unnamed)
    except DataError as exc:
        return f"no replayed evidence: {exc}"
    found = evidence(w, cfg, declared + [p["window"] for p in out], steps=len(frame) - w.start)
    for p in out:
        p["evidence"] = {**p["evidence"], **found.get(p["name"], {})}
    return None


class WindowProposals:
    """One computation at a time in its own worker; the last result kept per (history end to the hour, time zone,
    windows in force).

    The worker is a daemon thread, not a ThreadPoolExecutor's: the replay behind the evidence runs for a minute or
    more on a busy box, and an executor's worker is joined when the interpreter exits, so a daemon told to stop
    (SIGTERM, Ctrl-C under make run, systemctl stop) waited for it after it had said it was stopping. The
    computation reads the history store and changes nothing, so it is safe to drop at exit."""

    def __init__(self, config: Callable[[], Config], declared: Callable[[], list[dict]],
                 read: Callable[[Config], pd.DataFrame | None] = read_store) -> None:
        self._config, self._declared, self._read = config, declared, read
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._last: dict[str, Any] | None = None   # the last proposals computed (find() while computing again)
        self._job: Future | None = None

    def get(self, timezone: str) -> dict[str, Any]:
        """The proposals when computed for the current key, else {"status": "computing"} (the computation is
        started, or already running)."""
        cfg, declared = self._config(), self._declared()   # in memory (HA: the overrides' cached view)
        with self._lock:
            if self._job is not None and not self._job.done():
                return {"status": "computing"}
            if self._job is not None and self._job.exception() is None:
                res, key = self._job.result()
                if key == self._key and key[1] == timezone and key[2] == _names(declared) and not self._stale(res):
                    return res
            self._key = None
            self._job = _in_daemon_thread(self._run, cfg, declared, timezone)
            return {"status": "computing"}

    @staticmethod
    def _stale(res: dict) -> bool:
        """Computed over REFRESH ago: the history has moved on (no read of the store here: get() does no I/O)."""
        at = pd.Timestamp(res.get("computed_at", "1970-01-01T00:00:00+00:00"))
        return pd.Timestamp.now(tz="UTC") - at >= REFRESH

    def _run(self, cfg: Config, declared: list[dict], timezone: str) -> tuple[dict, tuple]:
        try:
            frame = self._read(cfg)
            res = compute(frame, cfg, declared, timezone)
        except Exception as exc:  # one line for the operator, never a traceback on the page
            log.warning("window proposals: %s", exc)
            res = {"status": "failed", "proposals": [], "why": f"{type(exc).__name__}: {exc}"}
        key = (res.get("history_end"), timezone, _names(declared))
        with self._lock:
            self._key = key
            if res.get("status") == "ready":
                self._last = res
        return res, key

    def find(self, name: str, timezone: str) -> dict | None:
        """A computed proposal's window by name (None: not among the current proposals).

        While they are computed again (accepting one changes the windows in force, which the evidence replays),
        the last ones computed for `timezone` serve, less those of a tenant that has a window now: the console's
        accept buttons of the other proposals answered 404 "the proposals moved on" for the minute the replay
        took, though the window each declares is read from the history alone. The window is still checked against
        the capacity and the others when it is declared."""
        for p in self.latest(timezone).get("proposals", []):
            if p["name"] == name:
                return p["window"]
        return None

    def latest(self, timezone: str) -> dict[str, Any]:
        """get(), but while the proposals are computed again, the last ones computed for `timezone` (less those of a
        tenant that has a window now) marked ``recomputing``: what the console's windows page lists, so that
        accepting one proposal does not take the others' accept buttons away for the minute the replay takes."""
        res = self.get(timezone)
        if res.get("status") != "computing":
            return res
        last = self._last_ready(timezone)
        return {**last, "recomputing": True} if last else res

    def _last_ready(self, timezone: str) -> dict[str, Any]:
        with self._lock:
            last = self._last
        if last is None or last.get("timezone") != timezone:
            return {}
        held = {w["tenant"] for w in self._declared()}
        return {**last, "proposals": [p for p in last.get("proposals", []) if p["tenant"] not in held]}

    def close(self) -> None:
        """Nothing to wait for: a computation under way is dropped with the process (see the class)."""


def _in_daemon_thread(fn: Callable, *args: Any) -> Future:
    """`fn(*args)` in a daemon thread of its own, its result (or exception) in the Future returned."""
    fut: Future = Future()

    def work() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever reads the Future, as an executor would
            fut.set_exception(exc)

    threading.Thread(target=work, name="window-proposals", daemon=True).start()
    return fut


def _names(declared: list[dict]) -> tuple[str, ...]:
    return tuple(sorted(w["name"] for w in declared))
