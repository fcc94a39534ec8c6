"""Console pages. Same tokens and the same rules as /api/v1; a login form keeps the token in a cookie.

Every page is one HTML document with its CSS inline and its charts as inline
SVG; the Content-Security-Policy forbids loading anything, from anywhere.
A page takes one snapshot (daemon/web/backend.py) and draws everything of the cycle from it.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from daemon.sources.redact import redact_text
from daemon.state.overrides import BadChange, OverridesUnavailable, WindowRefused, parse_window
from daemon.text import plural
from daemon.web import views, windows_api
from daemon.web.api import TENANT_RE, AccessHolder, BadInput, int_param, read_capped
from daemon.web.auth import COOKIE, Principal
from daemon.web.backend import Backend, Snapshot
from daemon.web.console.charts import Band, Chart, Line, forecast_x, series_x
from daemon.web.eta_view import eta_for
from daemon.web.health_view import health_for
from daemon.web.shadow_reports import ShadowReports

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}


SHADOW_CYCLES = 1440  # dry-run cycles the "What it would have done" page reads (an operator may ask ?cycles=N)
# an operator's ?cycles= is clamped to a week of 1-min cycles; a tenant token always reads the default window,
# counted once per cycle for every viewer (daemon/web/shadow_reports.py)
SHADOW_CYCLES_MAX = 10_080
FORM_CAP = 8192  # bytes of a console form; a longer body is refused unread (413)


async def read_form(request: Request) -> dict[str, list[str]] | None:
    """The console form sent with `request`, or None when its body is over FORM_CAP."""
    body = await read_capped(request, FORM_CAP)
    return None if body is None else parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL or Origin, default ports filled in and case folded; None if none."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return None
    scheme = u.scheme.lower()
    if scheme not in DEFAULT_PORTS or not u.hostname:
        return None
    return scheme, u.hostname.lower(), port or DEFAULT_PORTS[scheme]


def same_origin(origin: str, request: Request, public_url: object | None) -> bool:
    """Whether a form's Origin header is the console's own.

    Behind a TLS proxy the request arrives as http://127.0.0.1:9105 while the browser says
    `Origin: https://console.example`: with `server.public_url` set the Origin is checked against it (and
    only it). Without it, against the URL the request arrived on, as the browser would send it directly.
    """
    if public_url is not None:
        want = origin_of(str(public_url))
        return want is not None and origin_of(origin) == want
    return origin == f"{request.url.scheme}://{request.url.netloc}"


def pct(x) -> str:
    return "–" if x is None else f"{x:.0%}"


def event_text(e: dict) -> str:
    if e.get("message"):
        return str(e["message"])
    if e.get("reason"):
        job = f"job {e['job_id']} ({plural(e.get('gpus'), 'GPU')}) " if e.get("job_id") else ""
        return f"{job}{e['reason']}"
    if e.get("kind") == "node_down":
        secs = e.get("seconds")
        took = f" in {secs:.2f}s" if isinstance(secs, (int, float)) else ""
        errs = f"; errors: {'; '.join(e['errors'])}" if e.get("errors") else ""
        return f"node {e.get('node')} failed: {plural(len(e.get('jobs') or []), 'job')} requeued{took}{errs}"
    rest = {k: v for k, v in e.items() if k not in ("id", "at", "kind", "tenant")}
    return ", ".join(f"{k}={v}" for k, v in rest.items())


def _minutes_between(a: str, b: str) -> float | None:
    try:
        return (dt.datetime.fromisoformat(a) - dt.datetime.fromisoformat(b)).total_seconds() / 60
    except (TypeError, ValueError):
        return None


def load_chart(c: dict) -> Chart:
    hist = c["history"]
    now = c["at"] or (hist[-1]["at"] if hist else None)
    xs, used, cap, held = [], [], [], []
    for s in hist:
        x = _minutes_between(s["at"], now) if now else None
        if x is None:
            continue
        xs.append(x)
        cap.append(s["capacity"])
        used.append(s["load"] * s["capacity"] if s["load"] is not None else None)
        held.append(s["held"])
    return Chart("load-chart", "GPUs in use, healthy capacity and held capacity, per cycle",
                 [Line("in use", xs, used, "s-used"), Line("capacity", xs, cap, "s-cap", step=True),
                  Line("held", xs, held, "s-held", step=True)])


def forecast_chart(id: str, title: str, past: dict | None, past_name: str, forecast: dict | None,
                   levels: list[tuple[str, float | None, str]]) -> Chart:
    """A past series up to now, the p50 line and p50–p90 band after it, and flat levels across both."""
    ch = Chart(id, title)
    edge = [0.0]
    if past:
        xs = series_x(len(past["values"]), past["step_s"])
        ch.lines.append(Line(past_name, xs, past["values"], "s-used"))
        edge = [xs[0], 0.0]
    if forecast:
        fx = forecast_x(len(forecast["p50"]), forecast["step_s"])
        ch.bands.append(Band("p50–p90", fx, forecast["p50"], forecast["p90"], "b-p90"))
        ch.lines.append(Line("p50", fx, forecast["p50"], "s-p50"))
        edge = [edge[0], fx[-1]]
    for name, value, css in levels:
        if value is not None:
            ch.lines.append(Line(name, edge, [value] * len(edge), css))
    return ch


def band_chart(c: dict) -> Chart:
    return forecast_chart("cluster-forecast-chart",
                          "Demand and its forecast (sum over tenants of p50 and p90) against capacity",
                          c["demand"], "demand", c["forecast"],
                          [("capacity", c["capacity"], "s-cap"), ("held now", c["held"], "s-held")])


DEMAND = "demand (GPUs running + queued)"


def tenant_chart(t: dict) -> Chart:
    # what is drawn is the tenant's demand series (GPUs running + queued, as the policy reads it): the title and the
    # legend name it alike (DEMAND)
    return forecast_chart("forecast-chart", f"{t['tenant']}: {DEMAND} and its p50/p90 forecast",
                          t["usage"], DEMAND, t["forecast"],
                          [("held for you", t["held"] or None, "s-held"), ("quota", t["quota"], "s-quota")])


def window_form(form: dict[str, list[str]]) -> dict:
    """The console's window form as the API's body: empty fields left out, numbers as numbers, GPUs as a number or
    "h100=8,a100=8" (BadChange naming the field that is not one)."""
    def one(key: str) -> str:
        return (form.get(key) or [""])[0].strip()

    body: dict = {k: one(k) for k in ("tenant", "every", "day", "at", "cron", "timezone") if one(k)}
    for key in ("duration_minutes", "reclaim_before_minutes"):
        if one(key):
            try:
                body[key] = float(one(key))
            except ValueError:
                raise BadChange(key, f"not a number: {one(key)[:32]!r}") from None
    raw = one("gpus")
    try:
        pairs = [(k.strip(), int(v)) for k, v in (x.split("=", 1) for x in raw.split(","))] if "=" in raw else None
        body["gpus"] = int(raw) if pairs is None else dict(pairs)
    except ValueError:
        raise BadChange("gpus", f"not a number of GPUs (16) or GPUs per type (h100=8,a100=8): {raw[:32]!r}") from None
    types = [k.lower() for k, _ in pairs or ()]
    twice = next((t for t in types if types.count(t) > 1), None)
    if twice is not None:   # a dict keeps the last: "h100=2,h100=8" was 8, the first dropped without a word
        raise BadChange("gpus", f"the GPU type {twice[:32]!r} is given twice: {raw[:64]!r}")
    body["borrowable_before"] = bool(form.get("borrowable_before"))
    return body


def build(backend: Backend, holder: AccessHolder) -> list[Route]:
    templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
    reports = ShadowReports(backend.shadow_records)
    templates.env.globals.update(pct=pct, event_text=event_text)

    def page(request: Request, name: str, status: int = 200, **ctx) -> Response:
        ctx.setdefault("title", name.split(".")[0].capitalize())
        # a dry run on a real cluster: every preemption, hold and event the pages show is what it would have done
        # (the embedded simulator's cluster obeys the plan whatever dry_run says)
        cfg = backend.snapshot().cfg
        ctx.setdefault("dry_run_banner", cfg.actuators.dry_run and cfg.source.kind != "simulator")
        return templates.TemplateResponse(request, name, ctx, status_code=status, headers=HEADERS)

    def problem(request: Request, who: Principal | None, status: int, title: str, message: str) -> Response:
        return page(request, "problem.html", status, who=who, title=title, message=message)

    def to_login(request: Request) -> Response:
        nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/ui/login?next={quote(nxt)}", status_code=303, headers=HEADERS)

    def who(request: Request) -> Principal | None:
        return holder.get().from_request(request)

    def check_tenant(request: Request, snap: Snapshot, p: Principal, tenant: str) -> Response | None:
        if not TENANT_RE.match(tenant):
            return problem(request, p, 400, "Bad tenant name", f"tenant: not a valid tenant name: {tenant[:64]!r}")
        if not p.may_see(tenant):
            return problem(request, p, 403, "Not your tenant", f"{p.name} may only see tenant {p.tenant}.")
        if tenant not in views.tenant_names(snap):
            return problem(request, p, 404, "Unknown tenant", f"No tenant {tenant!r} in the current plan or config.")
        return None

    def operator_or_redirect(request: Request) -> Principal | Response:
        """The operator asking, or where to send anyone else: the login form, or a tenant's own page."""
        p = who(request)
        if p is None:
            return to_login(request)
        if not p.operator:
            return RedirectResponse(f"/ui/tenants/{quote(p.tenant or '')}", status_code=303, headers=HEADERS)
        return p

    def tenant_page(request: Request, snap: Snapshot, p: Principal, name: str, status: int = 200,
                    **extra) -> Response:
        t = views.tenant_view(snap, backend, name, p)
        t["override"] = t["override"] or {}
        pc = snap.cfg.policy
        health = backend.health(detail=p.operator)  # a tenant reads no error text (it may quote other tenants' jobs)
        stale = None
        if health["status"] != "ok" and health["reason"]:
            stale = redact_text(health["reason"])  # a source error names the source's URL: never its password
        return page(request, "tenant.html", status, who=p, title=name, t=t, chart=tenant_chart(t).svg(), stale=stale,
                    snapshot=snap.state is not None,
                    quantile=int(pc.quantile * 100),
                    lead=pc.lead_time_steps * snap.cfg.cycle.resolution_s // 60,
                    health=health_for(snap, p, name), eta=eta_for(snap.eta, time.time(), name), **extra)

    async def root(request: Request) -> Response:
        p = operator_or_redirect(request)
        if isinstance(p, Response):
            return p
        snap = backend.snapshot()
        c = views.cluster_view(snap, backend)
        tenants = [views.tenant_summary(snap, backend, t) for t in views.tenant_names(snap)]
        shown, throttled_all = views.listed_tenants(snap, tenants)
        notice = "Change saved; it applies at the next cycle." if request.query_params.get("saved") else None
        return page(request, "cluster.html", who=p, title="Cluster", c=c, load_chart=load_chart(c).svg(),
                    band_chart=band_chart(c).svg(), levels=snap.cfg.ratelimits.levels, tenants=shown,
                    throttled_all=throttled_all, gateway_limits=snap.cfg.actuators.gateway_limits,
                    paused=backend.overrides().inputs().paused_all, notice=notice, health=health_for(snap, p))

    async def login(request: Request) -> Response:
        nxt = request.query_params.get("next", "/ui/")
        if request.method == "GET":
            return page(request, "login.html", who=None, title="Sign in", next=nxt)
        cross = cross_site(request)
        if cross is not None:
            return cross
        form = await read_form(request)
        if form is None:
            return problem(request, None, 413, "Form too large", f"A sign-in form is at most {FORM_CAP} bytes.")
        nxt = (form.get("next") or ["/ui/"])[0]
        if not nxt.startswith("/ui/") or nxt.startswith("//"):
            nxt = "/ui/"
        p = holder.get().lookup((form.get("token") or [""])[0])
        if p is None:
            return page(request, "login.html", 401, who=None, title="Sign in", next=nxt,
                        error="That token is not valid here.")
        resp = RedirectResponse(nxt, status_code=303, headers=HEADERS)
        resp.set_cookie(COOKIE, (form.get("token") or [""])[0].strip(), httponly=True, samesite="strict", path="/",
                        secure=backend.config().access.cookie_secure)
        return resp

    async def logout(request: Request) -> Response:
        cross = cross_site(request)
        if cross is not None:
            return cross
        resp = RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    async def tenants(request: Request) -> Response:
        p = operator_or_redirect(request)
        if isinstance(p, Response):
            return p
        snap = backend.snapshot()
        rows = [views.tenant_summary(snap, backend, t) for t in views.tenant_names(snap)]
        return page(request, "tenants.html", who=p, title="Tenants", tenants=rows,
                    gated=any(t["acting_on_forecast"] is not None for t in rows),
                    overrides=backend.overrides().all()["tenants"])

    async def tenant(request: Request) -> Response:
        p = who(request)
        if p is None:
            return to_login(request)
        name = request.path_params["tenant"]
        snap = backend.snapshot()
        bad = check_tenant(request, snap, p, name)
        if bad is not None:
            return bad
        notice = "Change saved; it applies at the next cycle." if request.query_params.get("saved") else None
        return tenant_page(request, snap, p, name, notice=notice)

    def cross_site(request: Request, who: Principal | None = None) -> Response | None:
        """The refusal of a form another site's page sent (its Origin is not the console's), else None. The sign-in
        and sign-out forms are checked too: a page elsewhere could sign the operator's browser in with a tenant's
        token (its cookie then replaces the operator's; SameSite does not stop a cookie set by a top-level
        navigation's answer), or out."""
        origin = request.headers.get("origin")
        if origin is not None and not same_origin(origin, request, backend.config().server.public_url):
            return problem(request, who, 403, "Cross-site form", "This form must be sent from the console itself.")
        return None

    def operator_form(request: Request) -> Principal | Response:
        """The operator sending one of the console's forms, or the answer for anyone else."""
        p = who(request)
        if p is None:
            return to_login(request)
        if not p.operator:
            return problem(request, p, 403, "Operators only", "Only an operator token can change this.")
        cross = cross_site(request, p)
        return p if cross is None else cross

    async def operator_form_body(request: Request) -> tuple[Principal, dict[str, list[str]]] | Response:
        """operator_form, then the form's fields (a form over FORM_CAP is refused unread: 413)."""
        p = operator_form(request)
        if isinstance(p, Response):
            return p
        form = await read_form(request)
        if form is None:
            return problem(request, p, 413, "Form too large", f"A console form is at most {FORM_CAP} bytes.")
        return p, form

    async def global_override(request: Request) -> Response:
        got = await operator_form_body(request)
        if isinstance(got, Response):
            return got
        p, form = got
        paused = bool((form.get("preemption_paused") or [""])[0])
        try:  # in a worker thread: under HA the change is a round trip to the shared store
            await run_in_threadpool(backend.overrides().change_global, p.name, {"preemption_paused": paused})
        except OverridesUnavailable as exc:  # HA: refused, never kept only on this replica
            return problem(request, p, 503, "Change not stored", str(exc))
        return RedirectResponse("/ui/?saved=1", status_code=303, headers=HEADERS)

    async def tenant_override(request: Request) -> Response:
        p = operator_form(request)
        if isinstance(p, Response):
            return p
        name = request.path_params["tenant"]
        snap = backend.snapshot()
        bad = check_tenant(request, snap, p, name)
        if bad is not None:
            return bad
        form = await read_form(request)
        if form is None:
            return problem(request, p, 413, "Form too large", f"A console form is at most {FORM_CAP} bytes.")
        change: dict = {}
        try:
            change["tier"] = (form.get("tier") or [""])[0] or None
            for key, conv in (("rate_override", float), ("floor_gpus", int)):
                raw = (form.get(key) or [""])[0].strip()
                try:
                    change[key] = conv(raw) if raw else None
                except ValueError:
                    raise BadChange(key, f"not a number: {raw[:32]!r}") from None
            change["preemption_paused"] = bool(form.get("preemption_paused"))
            too_many = windows_api.floor_beyond_capacity(snap, backend.config(), change)
            if too_many is not None:
                raise BadChange("floor_gpus", too_many)
            await run_in_threadpool(backend.overrides().change_tenant, p.name, name, change)
        except BadChange as exc:
            return tenant_page(request, snap, p, name, 400, error=str(exc))
        except OverridesUnavailable as exc:  # HA: refused, never kept only on this replica
            return problem(request, p, 503, "Change not stored", str(exc))
        return RedirectResponse(f"/ui/tenants/{quote(name)}?saved=1", status_code=303, headers=HEADERS)

    async def events(request: Request) -> Response:
        p = who(request)
        if p is None:
            return to_login(request)
        kind = request.query_params.get("kind") or None
        if kind is not None and kind not in views.EVENT_KINDS:
            return problem(request, p, 400, "Bad filter", f"kind: not an event kind: {kind[:40]!r} (one of "
                           f"{', '.join(views.EVENT_KINDS)})")
        try:
            before = int_param(request, "before", None, 1, 2**62)  # the same bounds as /api/v1/events
        except BadInput as exc:
            return problem(request, p, 400, "Bad filter", str(exc))
        snap = backend.snapshot()
        rows = backend.events(100, kind, None if p.operator else p.tenant, before)
        older = rows[-1]["id"] if len(rows) == 100 else None
        rows = views.for_viewer(snap, p, rows)  # a tenant reads its own part of each event only
        return page(request, "events.html", who=p, title="Events", events=rows, kind=kind, older=older,
                    kinds=views.EVENT_KINDS)

    async def shadow(request: Request) -> Response:
        """What it would have done: the shadow report (daemon/shadow/report.py) of the newest dry-run cycles; a
        tenant token's report is computed from its own tenant's rows only."""
        p = who(request)
        if p is None:
            return to_login(request)
        try:
            limit = int_param(request, "cycles", SHADOW_CYCLES, 1, 100_000)
        except BadInput as exc:
            return problem(request, p, 400, "Bad filter", str(exc))
        # a tenant token reads the one window counted for every viewer of the cycle: a window of its own choosing
        # would be a read of every record (every tenant's) per request
        limit = min(limit, SHADOW_CYCLES_MAX) if p.operator else SHADOW_CYCLES
        snap = backend.snapshot()
        tenant = None if p.operator else p.tenant
        # counted once per cycle, in the reports' own worker: off the event loop (/healthz keeps answering) and
        # out of the default thread pool (an operator's PATCH never queues behind tenants' page loads)
        rep = await reports.report(snap.cycle, limit, tenant, private=tenant is not None)
        return page(request, "shadow.html", who=p, title="What it would have done", rep=rep,
                    dry_run=snap.cfg.actuators.dry_run, cycles=limit)

    def windows_page(request: Request, p: Principal, status: int = 200, **extra) -> Response:
        # an operator sees the windows proposed from the history (computed in their own worker, never here)
        proposed = windows_api.proposals(backend).latest(windows_api.proposal_zone(backend, None)) \
            if p.operator else None
        return page(request, "windows.html", status, who=p, title="Windows",
                    windows=windows_api.visible(backend, p), proposed=proposed, **extra)

    async def windows(request: Request) -> Response:
        """Recurring windows (docs/windows.md): a tenant sees its own tenant's; an operator all, and changes them."""
        p = who(request)
        if p is None:
            return to_login(request)
        notice = "Change saved; it applies at the next cycle." if request.query_params.get("saved") else None
        return windows_page(request, p, notice=notice)

    async def window_change(request: Request) -> Response:
        got = await operator_form_body(request)
        if isinstance(got, Response):
            return got
        p, form = got
        delete = "name" in request.path_params
        name = request.path_params["name"] if delete else (form.get("name") or [""])[0].strip()
        try:
            window = None if delete else parse_window(name, window_form(form))
            await run_in_threadpool(windows_api.change, backend, p.name, name, window)
        except BadChange as exc:
            return windows_page(request, p, 400, error=str(exc))
        except WindowRefused as exc:
            return windows_page(request, p, 409, error=str(exc))
        except KeyError:
            return windows_page(request, p, 404, error=f"unknown window {name!r}")
        except OverridesUnavailable as exc:  # HA: refused, never kept only on this replica
            return problem(request, p, 503, "Change not stored", str(exc))
        return RedirectResponse("/ui/windows?saved=1", status_code=303, headers=HEADERS)

    async def window_accept(request: Request) -> Response:
        """Accept a proposed window: declared as the API's PUT declares one (windows_api.change, audited)."""
        got = await operator_form_body(request)
        if isinstance(got, Response):
            return got
        p, _form = got
        name = request.path_params["name"]
        props = windows_api.proposals(backend)
        found = await run_in_threadpool(props.find, name, windows_api.proposal_zone(backend, None))
        if found is None:
            return windows_page(request, p, 404, error=f"no proposed window {name!r} (the proposals moved on)")
        try:
            window = parse_window(name, found)
            await run_in_threadpool(windows_api.change, backend, p.name, name, window)
        except BadChange as exc:
            return windows_page(request, p, 400, error=str(exc))
        except WindowRefused as exc:
            return windows_page(request, p, 409, error=str(exc))
        except OverridesUnavailable as exc:
            return problem(request, p, 503, "Change not stored", str(exc))
        return RedirectResponse("/ui/windows?saved=1", status_code=303, headers=HEADERS)

    async def slash(_: Request) -> Response:
        return RedirectResponse("/ui/", status_code=308)

    return [
        Route("/ui", slash),
        Route("/ui/", root),
        Route("/ui/login", login, methods=["GET", "POST"]),
        Route("/ui/logout", logout, methods=["POST"]),
        Route("/ui/tenants", tenants),
        Route("/ui/tenants/{tenant}", tenant),
        Route("/ui/tenants/{tenant}/override", tenant_override, methods=["POST"]),
        Route("/ui/overrides", global_override, methods=["POST"]),
        Route("/ui/events", events),
        Route("/ui/windows", windows),
        Route("/ui/windows", window_change, methods=["POST"]),
        Route("/ui/windows/{name}/delete", window_change, methods=["POST"]),
        Route("/ui/windows/proposals/{name}/accept", window_accept, methods=["POST"]),
        Route("/ui/shadow", shadow),
    ]
