"""The inference services' own forecaster beside the main one (forecaster.services in the config): one place that
the daemon (choose.build), `simulate` and the benches wrap their main forecaster through, so the replay's
predictive row runs what the daemon runs.

Why: an inference service's load is a request rate with a daily cycle, and a replica starts a cold start late;
fitted on the service's window means, the daily seasonal naive sees yesterday's rise at this hour where a model
at the cycle's one-minute step sees the draws' noise (docs/replay.md: 31-50% of the gap from reactive to the
perfect forecast closed at 1-9 min cold starts, against 0-2% for the one-minute choice).
"""

from __future__ import annotations

from collections.abc import Iterable

from daemon.config import Config
from forecaster.composite import ServicesComposite, min_history_steps, seasonal_windows


def service_tenants(cfg: Config) -> list[str]:
    """The tenants the config names as inference services (a `[tenants.inference]` table)."""
    return [t.name for t in cfg.tenants if t.inference is not None]


def with_services(cfg: Config, main, services: Iterable[str], *, background: bool = False) -> tuple[object, str]:
    """``main`` with the services' columns forecast by their own model, and a short note on what was chosen (empty
    when nothing changed: no services, forecaster.services.kind = "same", or no forecast at all).

    kind "auto" and "seasonal_windows": the daily seasonal naive (recalibrated) on forecaster.services.window_s
    windows, from the first cycle whose history holds a day of windows and one more (min_history_steps: 1,460
    steps at 60 s and 600 s windows, under the default cycle.history_steps of 2,880); before that the main model
    forecasts the services too. ``background``: the baseline's spreads are recomputed in a thread (the daemon);
    off, in the forecast call (a replay: the same history, the same numbers)."""
    svc = sorted({str(s) for s in services})
    sv = cfg.forecaster.services
    if not svc or sv.kind == "same" or getattr(main, "name", None) == "none":
        return main, ""
    step = cfg.cycle.resolution_s
    need = min_history_steps(sv.window_s, step)
    inner = seasonal_windows(sv.window_s, tuple(cfg.forecaster.quantiles), background=background)
    model = ServicesComposite(main, inner, svc, services_min_history=need)
    note = (f"services ({len(svc)}): {inner.name} on their {sv.window_s // 60:g}-minute window means once the "
            f"history holds {need} steps (a day of windows), {main.name} before")
    return model, note
