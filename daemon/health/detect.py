"""Pure detectors: idle, hung, memory leak and GPU errors, per job, from per-GPU telemetry on a step grid.

Rules every detector keeps (the issue's safety line):
- A missing sample (NaN) never counts as idle or hung time. A run of idle steps is the newest run of *present*
  samples under the threshold; a gap longer than ``max_gap_s`` ends it, a shorter one adds no time.
- A job with no fresh telemetry (its newest sample older than ``stale_after_s``) is ``no_data``, never idle.
- A job step counts only when every GPU of the job has a sample there: one GPU unseen is not "all idle". Whether
  the GPUs seen are *all* the job's GPUs (and on its nodes) only the scheduler knows: daemon/health/reclaim.py
  (`coverage_gap`) refuses to warn or act on a job whose telemetry covers fewer or other GPUs.
- The run is clipped to the job's time since its last (re)start when the scheduler says it: a Slurm job keeps its
  id across a requeue, and the idle minutes before the requeue must not trigger another one.

The XID gauge (``DCGM_FI_DEV_XID_ERRORS``) holds the *last* XID the GPU reported, not a count: a value is an
event when it appears or changes within the window. Critical XIDs (hardware, driver) and application XIDs (the
NVIDIA device plugin ignores 13, 31, 43, 45, 68 and 109: the job's own fault) are kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from daemon.config.models import HealthConfig
from daemon.health.types import Finding, GpuTrace, JobStatus, Telemetry


@dataclass(frozen=True)
class Run:
    """A trailing run: `minutes` of present samples that met the condition, from `since` to `until`."""

    minutes: float
    since: float
    until: float
    start: int       # index of the run's first step
    end: int         # index of its last step (the newest present one)


def trailing_run(cond: np.ndarray, present: np.ndarray, step_s: float, max_gap_steps: int) -> Run | None:
    """The newest run of present steps where `cond` holds, walking back from the newest present step.

    Missing steps add no time; more than `max_gap_steps` of them in a row end the run; a present step where
    `cond` does not hold ends it. None when the newest present step does not meet `cond` (or none is present).
    """
    idx = np.flatnonzero(present)
    if idx.size == 0 or not cond[idx[-1]]:
        return None
    last = int(idx[-1])
    count, first, gap = 0, last, 0
    for i in range(last, -1, -1):
        if not present[i]:
            gap += 1
            if gap > max_gap_steps:
                break
            continue
        if not cond[i]:
            break
        gap = 0
        count += 1
        first = i
    minutes = count * step_s / 60.0
    return Run(minutes, float(first), float(last), first, last)


def mins(m: float) -> str:
    """Minutes as people read them: whole minutes from 10 up, one decimal below."""
    return f"{m:.0f} min" if m >= 10 else f"{m:.1f} min"


def _stack(gpus: list[GpuTrace], field: str) -> np.ndarray:
    return np.vstack([getattr(g, field) for g in gpus])


def _names(gpus: list[GpuTrace]) -> tuple[str, ...]:
    return tuple(f"{g.host}:{g.gpu}" for g in gpus)


def _clip_steps(tel: Telemetry, runtime_s: float | None) -> int:
    """The first step inside the job's current run (0: the whole window)."""
    if runtime_s is None or not np.isfinite(runtime_s):
        return 0
    start_t = tel.end - runtime_s
    t = tel.times()
    return int(np.searchsorted(t, start_t, side="right"))  # a sample at the start itself is the old run's


def _run_finding(tel: Telemetry, run: Run, **kw) -> dict:
    t = tel.times()
    return {"since": float(t[run.start]), "until": float(t[run.end]), "minutes": round(run.minutes, 3), **kw}


def detect_job(tel: Telemetry, gpus: list[GpuTrace], cfg: HealthConfig, stale_after_s: float,
               runtime_s: float | None = None) -> tuple[JobStatus, list[Finding]]:
    """One job's status and findings (hung takes the place of idle: same GPUs, a stronger claim)."""
    g0 = gpus[0]
    job, sched, tenant = g0.job, g0.scheduler, g0.tenant
    if job in tel.rejected:
        return JobStatus(job, sched, tenant, len(gpus), "rejected", tel.rejected[job]), []
    act = _stack(gpus, "activity")
    first = _clip_steps(tel, runtime_s)
    if first > 0:
        act = act.copy()
        act[:, :first] = np.nan
    present = np.isfinite(act).all(axis=0)
    t = tel.times()
    seen = np.flatnonzero(present)
    if seen.size == 0 or tel.end - t[seen[-1]] > stale_after_s:
        why = "no sample in the window" if seen.size == 0 else \
            f"newest complete sample is {tel.end - t[seen[-1]]:.0f}s old (> {stale_after_s:g}s)"
        return JobStatus(job, sched, tenant, len(gpus), "no_data", why), _xid_findings(tel, gpus, cfg)
    gap = max(0, int(cfg.max_gap_s // tel.step_s))
    findings: list[Finding] = []
    newest = act[:, seen[-1]]
    busy_share = float(newest.mean())
    names = _names(gpus)

    # per-GPU idle (for the allocated-but-idle count), then the job as a whole
    idle_gpus = 0
    for row in act:
        p = np.isfinite(row)
        r = trailing_run(np.where(p, row < cfg.idle_activity_max, False), p, tel.step_s, gap)
        if r is not None and r.minutes >= cfg.idle_warn_minutes:
            idle_gpus += 1

    fb_used, fb_free = _stack(gpus, "fb_used"), _stack(gpus, "fb_free")
    if first > 0:
        fb_used, fb_free = fb_used.copy(), fb_free.copy()
        fb_used[:, :first] = np.nan
        fb_free[:, :first] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        share = fb_used / (fb_used + fb_free)
    quiet = np.where(present, (act < cfg.hung_activity_max).all(axis=0), False)
    held = np.where(np.isfinite(share).all(axis=0), np.nan_to_num(share).min(axis=0) >= cfg.hung_fb_min_share, False)
    hung = trailing_run(quiet & held, present, tel.step_s, gap)
    if hung is not None and hung.minutes >= cfg.hung_warn_minutes:
        sl = slice(hung.start, hung.end + 1)
        findings.append(Finding(
            kind="hung", job=job, scheduler=sched, tenant=tenant, gpus=names,
            summary=f"job {job} hung: activity under {cfg.hung_activity_max:.0%} on all {len(gpus)} GPU(s) with "
                    f"the framebuffer held (>= {cfg.hung_fb_min_share:.0%}) for {mins(hung.minutes)}",
            **_run_finding(tel, hung, numbers={
                "max_activity": float(np.nanmax(act[:, sl])),
                "min_fb_share": float(np.nanmin(share[:, sl])), "gpus": float(len(gpus))})))
    else:
        idle = trailing_run(np.where(present, (act < cfg.idle_activity_max).all(axis=0), False), present,
                            tel.step_s, gap)
        if idle is not None and idle.minutes >= cfg.idle_warn_minutes:
            sl = slice(idle.start, idle.end + 1)
            findings.append(Finding(
                kind="idle", job=job, scheduler=sched, tenant=tenant, gpus=names,
                summary=f"job {job} idle: all {len(gpus)} GPU(s) under {cfg.idle_activity_max:.0%} activity "
                        f"for {mins(idle.minutes)}",
                **_run_finding(tel, idle, numbers={
                    "mean_activity": float(np.nanmean(act[:, sl])), "max_activity": float(np.nanmax(act[:, sl])),
                    "gpus": float(len(gpus))})))
    leak = _leak(tel, gpus, share, cfg)
    if leak is not None:
        findings.append(leak)
    findings.extend(_xid_findings(tel, gpus, cfg))
    return JobStatus(job, sched, tenant, len(gpus), "ok", idle_gpus=idle_gpus, busy_share=busy_share,
                     names=names), findings


def _leak(tel: Telemetry, gpus: list[GpuTrace], share: np.ndarray, cfg: HealthConfig) -> Finding | None:
    """Framebuffer use rising steadily toward full: over the last leak_window_minutes, a least-squares line with
    a positive slope, most steps not falling, a rise of at least leak_min_rise_share, and full projected
    within leak_full_within_minutes. The GPUs that meet it are named."""
    steps = max(3, int(round(cfg.leak_window_minutes * 60 / tel.step_s)))
    w = share[:, -steps:]
    t = tel.times()[-steps:]
    hits: list[int] = []
    nums: dict[str, float] = {}
    for i, row in enumerate(w):
        ok = np.isfinite(row)
        if ok.sum() < max(3, int(0.8 * steps)):   # too few samples to call a trend: not a leak
            continue
        x, y = (t[ok] - t[ok][0]) / 60.0, row[ok]
        rise = float(y[-1] - y[0])
        if not rise >= cfg.leak_min_rise_share:   # no rise, no leak: the fit is not needed (most GPUs, each cycle)
            continue
        d = np.diff(y)
        rising = float((d >= 0).mean()) if d.size else 0.0
        slope, icpt = np.polyfit(x, y, 1)
        to_full = (1.0 - y[-1]) / slope if slope > 0 else float("inf")
        if slope > 0 and rising >= cfg.leak_monotone_share and rise >= cfg.leak_min_rise_share \
                and to_full <= cfg.leak_full_within_minutes:
            hits.append(i)
            if not nums or to_full < nums["minutes_to_full"]:
                nums = {"slope_share_per_min": float(slope), "fb_share_start": float(y[0]),
                        "fb_share_now": float(y[-1]), "rising_share": rising, "minutes_to_full": float(to_full)}
    if not hits:
        return None
    g = [gpus[i] for i in hits]
    g0 = gpus[0]
    return Finding(kind="memory_leak", job=g0.job, scheduler=g0.scheduler, tenant=g0.tenant, gpus=_names(g),
                   since=float(t[0]), until=float(t[-1]), minutes=round(cfg.leak_window_minutes, 3),
                   numbers=nums, summary=f"job {g0.job} memory leak: framebuffer rose from "
                   f"{nums['fb_share_start']:.0%} to {nums['fb_share_now']:.0%} in {mins(cfg.leak_window_minutes)}; "
                   f"full in about {mins(nums['minutes_to_full'])}")


def _xid_findings(tel: Telemetry, gpus: list[GpuTrace], cfg: HealthConfig) -> list[Finding]:
    """An XID that appears or changes within the window (the gauge holds the last one; a value already there at
    the window's first sample is old news and is not reported again). Only XIDs in xid_critical or
    xid_application are reported."""
    crit, app = set(cfg.xid_critical), set(cfg.xid_application)
    t = tel.times()
    out: dict[str, list] = {"gpu_error": [], "app_xid": []}
    for g in gpus:
        x = g.xid
        if not (x > 0).any():   # no XID in the window (NaN compares False): nothing to report, checked cheaply
            continue
        ok = np.flatnonzero(np.isfinite(x))
        vals = x[ok]
        changed = np.flatnonzero((vals != np.concatenate(([vals[0]], vals[:-1]))) & (vals > 0))
        for j in changed:
            code = int(vals[j])
            if code in crit:
                out["gpu_error"].append((g, code, float(t[ok[j]])))
            elif code in app:
                out["app_xid"].append((g, code, float(t[ok[j]])))
            # an XID in neither list is not reported: add it to one of them to see it
    res = []
    for kind, hits in out.items():
        if not hits:
            continue
        g0 = hits[0][0]
        codes = sorted({c for _, c, _ in hits})
        when = [w for _, _, w in hits]
        what = "critical XID" if kind == "gpu_error" else "application XID (the job's own fault)"
        res.append(Finding(kind=kind, job=g0.job, scheduler=g0.scheduler, tenant=g0.tenant,
                           gpus=tuple(dict.fromkeys(f"{g.host}:{g.gpu}" for g, _, _ in hits)),
                           since=min(when), until=max(when), minutes=0.0,
                           numbers={"xid": float(codes[-1]), "xids": float(len(hits))},
                           summary=f"job {g0.job}: {what} {', '.join(map(str, codes))}"))
    return res


def detect(tel: Telemetry, cfg: HealthConfig, stale_after_s: float,
           runtime_s: Mapping[str, float] | None = None) -> tuple[list[JobStatus], list[Finding]]:
    """Every job in `tel`: its status and its findings, jobs in name order."""
    statuses, findings = [], []
    runtime_s = runtime_s or {}
    by_job = tel.by_job()
    for job in sorted(by_job):
        st, fs = detect_job(tel, by_job[job], cfg, stale_after_s, runtime_s.get(job))
        statuses.append(st)
        findings.extend(fs)
    for job in sorted(set(tel.rejected) - set(by_job)):
        statuses.append(JobStatus(job, "slurm", None, 0, "rejected", tel.rejected[job]))
    return statuses, findings
