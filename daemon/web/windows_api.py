"""/api/v1/windows: recurring capacity windows (issue 39, docs/windows.md), the config's and the operator's.

GET lists the windows the caller may see (a tenant token: its own tenant's only; another tenant's window is
404, as if it did not exist, so names do not leak). An operator token PUTs (creates or replaces) and DELETEs
the operator's windows; each change is audited like the other operator changes and stored where they are
(under HA in the lease backend, so a takeover keeps them). A window of the config file is changed in the file.
A change the cluster cannot take (a window larger than its type's GPUs, an overlap over the capacity with the
config's windows or the operator's) is refused with 409, the conflict named.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.config import DEFAULT_TYPE, Config, WindowConfig
from daemon.config.windows import WINDOW_NAME, problems
from daemon.state.overrides import BadChange, OverridesUnavailable, WindowRefused, parse_window
from daemon.web.auth import Principal
from daemon.web.backend import Backend, Snapshot
from daemon.web.views import tenant_names
from daemon.web.window_proposals import WindowProposals

_PROPOSALS: dict[int, WindowProposals] = {}


def capacity_now(snap: Snapshot, cfg: Config) -> dict[str, int]:
    """GPUs per type as the last plan saw them (the scheduler's own count), else what the config knows."""
    p = snap.plan
    if p is not None and not p.stale:
        if cfg.fleet.typed and p.capacity_by_type:
            return dict(p.capacity_by_type)
        if not cfg.fleet.typed and p.capacity > 0:
            return {DEFAULT_TYPE: int(p.capacity)}
    return cfg.known_capacity()


def floor_beyond_capacity(snap: Snapshot, cfg: Config, body: object) -> str | None:
    """Why an operator's floor_gpus cannot be held (more GPUs than the cluster has, as the last plan saw it or the
    config knows), else None. A floor of 100000 on a 1,024-GPU cluster was stored (200): the plan then held what
    was left for that tenant, 496 GPUs, beside its other holds, and said nothing of the typo; a window that large is
    refused, and so is this."""
    floor = body.get("floor_gpus") if isinstance(body, dict) else None
    if not isinstance(floor, int) or isinstance(floor, bool):
        return None
    cap = sum(capacity_now(snap, cfg).values())
    if cap and floor > cap:
        return f"{floor} is more than the {cap} GPUs the cluster has"
    return None


def window_view(w: WindowConfig, source: str, now: dt.datetime, min_lead_s: float = 0.0) -> dict[str, Any]:
    """The window as listed: `next_start` is the occurrence in progress at `now`, else the next one; `open_until`
    its end while it is in progress (None otherwise), so a start already past is not read as one to come;
    `held_from` its lead time as the plan holds it (reclaim_before, at least `min_lead_s`: Config.window_min_lead_s)."""
    nxt = w.occurrence(now)
    lead = w.held_lead(min_lead_s)
    open_until = nxt + w.duration if nxt is not None and nxt <= now else None
    return {**w.model_dump(mode="json"), "source": source, "slurm_flag": w.slurm_flag(),
            "next_start": nxt.isoformat() if nxt is not None else None,
            "held_from": (nxt - lead).isoformat() if nxt is not None else None,
            "open_until": open_until.isoformat() if open_until is not None else None}


def plan_clock(snap: Snapshot, cfg: Config) -> dt.datetime:
    """Now on the clock the plan holds windows by (the snapshot's time, daemon/policy/engine.py): on the embedded
    simulator its own clock (a simulated day, not today), the last plan's time; elsewhere the wall clock, which a
    real source's snapshots follow. A window's next start read on the other clock would not be the one held."""
    if cfg.source.kind == "simulator" and snap.plan is not None:
        at = dt.datetime.fromisoformat(snap.plan.at)
        return at if at.tzinfo is not None else at.replace(tzinfo=dt.timezone.utc)
    return dt.datetime.now(dt.timezone.utc)


def visible(backend: Backend, p: Principal) -> list[dict[str, Any]]:
    """The config's and the operator's windows `p` may see (an operator's replaces the config's of its name), by
    name, each with its source and next start (on the plan's clock)."""
    cfg = backend.config()
    now = plan_clock(backend.snapshot(), cfg)
    ops = {k: WindowConfig.model_validate(v) for k, v in backend.overrides().windows().items()}
    lead = cfg.window_min_lead_s()
    out = [window_view(w, "config", now, lead) for w in cfg.windows if w.name not in ops]
    out += [window_view(w, "api", now, lead) for w in ops.values()]
    return sorted((w for w in out if p.may_see(w["tenant"])), key=lambda w: w["name"])


def change(backend: Backend, who: str, name: str, window: WindowConfig | None) -> dict:
    """Store (or delete, None) the operator's window `name`, checked with the config's against the capacity the
    last plan saw. Blocking (HA: the shared store): call it in a worker thread. Raises WindowRefused (also for a
    window of the config file), KeyError (no such operator's window), OverridesUnavailable."""
    cfg, snap = backend.config(), backend.snapshot()
    if any(w.name == name for w in cfg.windows):
        raise WindowRefused(f"window {name!r} is in the config file: change it there (and reload)")

    def check(ops: dict[str, WindowConfig]) -> list[str]:
        merged = {w.name: w for w in cfg.windows}
        merged.update(ops)
        # the tenants the daemon knows: the config's, else (none listed) those its source and plan name, so that a
        # window for a tenant that does not exist ('tënant-0001') is refused, not stored to hold GPUs for no one
        listed = [t.name for t in cfg.tenants]
        return problems(merged.values(), capacity_now(snap, cfg), cfg.fleet.typed, listed or tenant_names(snap),
                        tenants_are="one of [[tenants]]" if listed else
                        "a tenant the daemon has seen (the config lists none in [[tenants]])",
                        min_lead_s=cfg.window_min_lead_s())

    return backend.overrides().change_window(who, name, window, check)


def declared(backend: Backend) -> list[dict]:
    """The windows in force (the config's, the operator's replacing those of their name) as dicts."""
    ws = {w.name: w.model_dump(mode="json") for w in backend.config().windows}
    ws.update(backend.overrides().windows())
    return list(ws.values())


def proposals(backend: Backend) -> WindowProposals:
    """The backend's proposals (one computation worker and cache per backend, shared by the API and the console)."""
    if id(backend) not in _PROPOSALS:
        _PROPOSALS[id(backend)] = WindowProposals(backend.config, lambda: declared(backend))
    return _PROPOSALS[id(backend)]


def proposal_zone(backend: Backend, asked: str | None) -> str:
    """The proposals' time zone: the one asked for, else the config's windows' (the first), else UTC."""
    if asked:
        return asked
    ws = backend.config().windows
    return ws[0].timezone if ws else "UTC"


def build(backend: Backend, guarded: Callable, error: Callable, json_body: Callable,
          bad_input: type[Exception]) -> list[Route]:
    async def listing(_: Request, p: Principal) -> Response:
        return JSONResponse({"windows": visible(backend, p)})

    async def proposed(request: Request, p: Principal) -> Response:
        """Windows proposed from the history (operators only): 202 while they are computed, off the cycle."""
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        zone = proposal_zone(backend, request.query_params.get("timezone"))
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            return error(400, f"timezone: {zone[:64]!r} is not an IANA time zone (Europe/Paris, UTC)", "timezone")
        res = await run_in_threadpool(proposals(backend).get, zone)
        return JSONResponse(res, status_code=202 if res["status"] == "computing" else 200)

    async def one(request: Request, p: Principal) -> Response:
        name = request.path_params["name"]
        if not WINDOW_NAME.match(name):
            return error(400, f"name: not a window name: {name[:64]!r}", "name")
        if request.method in ("PUT", "DELETE"):
            if not p.operator:
                return error(403, f"{p.name}: operator token required to change a window")
            return await put_or_delete(request, p, name)
        for w in visible(backend, p):
            if w["name"] == name:
                return JSONResponse(w)
        return error(404, f"unknown window {name!r}")

    async def put_or_delete(request: Request, p: Principal, name: str) -> Response:
        window = None
        if request.method == "PUT":
            try:
                window = parse_window(name, await json_body(request))
            except BadChange as exc:
                raise bad_input(exc.field, str(exc).split(": ", 1)[1]) from None
        try:  # in a worker thread: under HA the change is a round trip to the shared store
            return JSONResponse(await run_in_threadpool(change, backend, p.name, name, window))
        except WindowRefused as exc:
            return error(409, str(exc))
        except KeyError:
            return error(404, f"unknown window {name!r}")
        except OverridesUnavailable as exc:  # HA: refused, never kept only on this replica
            return error(503, str(exc))

    return [Route("/api/v1/windows", guarded(listing)),
            Route("/api/v1/windows/proposals", guarded(proposed, operator=True)),
            Route("/api/v1/windows/{name}", guarded(one), methods=["GET", "PUT", "DELETE"])]
