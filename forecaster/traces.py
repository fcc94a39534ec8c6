"""Real public traces (../shared/data) turned into tenant x time demand frames.

The data files are read from where they lie (or a path given); they are never
copied into the package.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ALIBABA_EPOCH = pd.Timestamp("2023-01-01T00:00:00Z")  # the trace's times are relative; any fixed origin works
QOS_TIER = {"LS": "high", "Guaranteed": "high", "Burstable": "normal", "BE": "low"}


def alibaba_pods(data_dir: Path) -> pd.DataFrame:
    p = Path(data_dir) / "alibaba-gpu-2023" / "openb_pod_list_default.csv"
    pods = pd.read_csv(p)
    # a GPU-sharing pod asks for gpu_milli thousandths of one GPU
    share = np.where(pods["num_gpu"] == 1, pods["gpu_milli"].fillna(1000) / 1000.0, 1.0)
    pods["gpus"] = np.where(pods["num_gpu"] > 0, pods["num_gpu"] * share, 0.0)
    return pods


def gpus_alive(pods: pd.DataFrame, by: str, step_s: int) -> pd.DataFrame:
    """The GPUs (column ``gpus``) of the Alibaba pods alive in each step, one column per value of ``pods[by]``
    (sorted), indexed by time from ALIBABA_EPOCH to the last deletion. A pod counts from the step of its creation
    (its demand starts then, whether or not it was scheduled) until the step of its deletion, at least one step.
    Shared by alibaba_demand and the simulator's typed fleet (daemon/sim/fleet_replay.py), so both count alike."""
    end = int(pods["deletion_time"].max() // step_s) + 1
    groups = sorted(pods[by].unique())
    out = np.zeros((end + 1, len(groups)))
    for j, g in enumerate(groups):
        sub = pods[pods[by] == g]
        s = (sub["creation_time"] // step_s).astype(int).to_numpy()
        e = (sub["deletion_time"] // step_s).astype(int).to_numpy()
        delta = np.zeros(end + 2)
        np.add.at(delta, s, sub["gpus"].to_numpy())
        np.add.at(delta, np.maximum(e, s + 1), -sub["gpus"].to_numpy())
        out[:, j] = np.cumsum(delta)[: end + 1]
    idx = pd.date_range(ALIBABA_EPOCH, periods=end + 1, freq=pd.Timedelta(seconds=step_s), name="time")
    return pd.DataFrame(np.maximum(out, 0), index=idx, columns=pd.Index(groups, name="tenant"))


def alibaba_demand(data_dir: Path, step_s: int = 300, last_days: float | None = 50.0,
                   by: str = "qos") -> tuple[pd.DataFrame, dict[str, str]]:
    """GPUs alive per step from pod create/delete times, one column per QoS class (LS ~ high, BE ~ low).

    A pod counts from creation (its demand starts then, whether or not it was
    scheduled) until deletion.
    """
    pods = alibaba_pods(data_dir)
    alive = gpus_alive(pods[pods["gpus"] > 0], by, step_s)
    groups = list(alive.columns)
    names = [f"alibaba-{g}" for g in groups]
    frame = alive.round(3).set_axis(pd.Index(names, name="tenant"), axis=1)
    if last_days is not None:
        frame = frame[frame.index >= frame.index[-1] - pd.Timedelta(days=last_days)]
    tiers = {f"alibaba-{g}": QOS_TIER.get(g, "normal") for g in groups}
    return frame, tiers


def azure_requests(data_dir: Path, step_s: int = 10) -> pd.DataFrame:
    """Requests per step for the two Azure LLM services ('code', 'conv'), as two tenants."""
    cols = {}
    for name in ("code", "conv"):
        df = pd.read_csv(Path(data_dir) / "azure-llm-2023" / f"{name}.csv")
        t = pd.to_datetime(df["TIMESTAMP"], format="%Y-%m-%d %H:%M:%S.%f", utc=True)
        cols[f"azure-{name}"] = t.dt.floor(pd.Timedelta(seconds=step_s)).value_counts().sort_index()
    frame = pd.DataFrame(cols)
    full = pd.date_range(frame.index.min(), frame.index.max(), freq=pd.Timedelta(seconds=step_s), name="time")
    # inside the trace's span, a step with no request is a real zero (the log is complete), not a gap
    frame = frame.reindex(full).fillna(0.0)
    frame.columns.name = "tenant"
    return frame


def helios_demand(data_dir: Path, step_s: int = 300) -> pd.DataFrame:
    """GPU demand (running + pending GPUs) per Helios Earth virtual cluster, May 2020, averaged to `step_s`."""
    root = Path(data_dir) / "helios-earth-2020"
    files = sorted(root.glob("vc*/cluster_sequence_vc.csv"))
    if not files:
        raise OSError(f"no Helios VC files under {root}")
    cols = {}
    for f in files:
        d = pd.read_csv(f, usecols=["time", "running_gpu_num", "pending_gpu_num"], parse_dates=["time"],
                        index_col="time")
        cols[f"helios-{f.parent.name}"] = (d["running_gpu_num"] + d["pending_gpu_num"]).astype(float)
    frame = pd.DataFrame(cols)
    frame.index = frame.index.tz_localize("UTC")
    frame = frame.resample(pd.Timedelta(seconds=step_s)).mean()
    frame.index.name, frame.columns.name = "time", "tenant"
    return frame


SERVEGEN_EPOCH = pd.Timestamp("2025-01-06T00:00:00Z")  # t = 0 is a midnight; the weekday is unknown


def servegen_rates(data_dir: Path) -> pd.DataFrame:
    """Mean requests/s per ServeGen m-small client per 10-minute window (14 days); idle windows are 0."""
    root = Path(data_dir) / "servegen-2025" / "m-small"
    files = sorted(root.glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
    if not files:
        raise OSError(f"no ServeGen files under {root}")
    cols = {}
    for f in files:
        d = pd.read_csv(f, header=None, usecols=[0, 1], names=["t", "rate"])
        s = pd.Series(d["rate"].to_numpy(dtype=float), index=SERVEGEN_EPOCH + pd.to_timedelta(d["t"], unit="s"))
        cols[f"servegen-{f.name.split('-')[1]}"] = s
    frame = pd.DataFrame(cols).sort_index()
    frame.index.name, frame.columns.name = "time", "tenant"
    return frame


SERVEGEN_WINDOW_S = 600


def servegen_windows(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ServeGen m-small per client and 10-minute window: the mean request rate (req/s) and the coefficient of
    variation of the inter-arrival times (0 where the client was idle), as two time x client frames. A file that
    is not the trace's format is refused with one line naming the file and row (ValueError).

    A window where every client is at 0 at once is a gap in the collection, not idle load: NaN in both frames
    (``servegen_gaps`` lists them). The 43 clients' total is about 1,200 req/s around each of the 37 such
    windows (from 04:00 on the 8th day: 0 for 10 to 70 minutes between two windows of ordinary load); one client
    at 0 is idle, as data/README.md says, but all of them at once is missing data, and missing data is never zero
    load."""
    root = Path(data_dir) / "servegen-2025" / "m-small"
    files = sorted(root.glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
    if not files:
        raise OSError(f"no ServeGen files under {root}")
    rates, cvs = {}, {}
    for f in files:
        try:
            d = pd.read_csv(f, header=None, usecols=[0, 1, 2], names=["t", "rate", "cv"])
        except (ValueError, pd.errors.ParserError) as exc:
            raise ValueError(f"{f}: not a ServeGen trace (timestamp,rate,cv,...): {exc}") from None
        for col in ("t", "rate", "cv"):
            v = pd.to_numeric(d[col], errors="coerce")
            bad = ~np.isfinite(v.to_numpy(dtype=float)) | (v.to_numpy(dtype=float) < 0)
            if col == "cv":
                bad &= d[col].notna().to_numpy()  # an idle window may leave the cv empty
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{f}: row {i + 1}: {col} {str(d[col].iloc[i])!r} is not a number >= 0")
            d[col] = v
        t = d["t"].to_numpy(dtype=float)
        bad = (t % SERVEGEN_WINDOW_S != 0) | np.r_[False, np.diff(t) <= 0]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{f}: row {i + 1}: timestamp {d['t'].iloc[i]:g} is not the next 10-minute window")
        name = f"servegen-{f.name.split('-')[1]}"
        at = SERVEGEN_EPOCH + pd.to_timedelta(d["t"], unit="s")
        rates[name] = pd.Series(d["rate"].to_numpy(dtype=float), index=at)
        cvs[name] = pd.Series(d["cv"].fillna(0.0).to_numpy(dtype=float), index=at)
    out = []
    for cols in (rates, cvs):
        frame = pd.DataFrame(cols).sort_index()
        frame.index.name, frame.columns.name = "time", "tenant"
        out.append(frame)
    gap = servegen_gaps(out[0])
    return out[0].mask(gap, axis=0), out[1].mask(gap, axis=0)


SERVEGEN_FAMILIES = ("Gamma", "Weibull")
# the shapes a family's draw stays finite over (daemon/sim/servegen.py, draw_arrivals_fitted): a Weibull's draws are
# E^(1/shape) of exponential E, past a float from shape ~0.005 (E to ~50); a Gamma's about its shape, a window's
# millions of them summed. The trace's own fits: Gamma 0.01-364, Weibull 0.16-2.3
SERVEGEN_SHAPES = {"Gamma": (0.0, 1e6), "Weibull": (0.02, np.inf)}


def servegen_patterns(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ServeGen m-small per client and 10-minute window: the inter-arrival family ServeGen fitted (``Gamma`` or
    ``Weibull``; ``""`` where the client was idle) and its shape parameter (NaN there), as two time x client frames
    on ``servegen_windows``' index. The fitted scale is not kept: ServeGen's own generator (servegen/construct.py,
    ``_sample_iats``) rescales a window's draws to fill it at its rate, so only the family and shape shape the
    arrivals. A family other than those two, or a shape that is not a number > 0 within the family's
    SERVEGEN_SHAPES, is refused with one line naming the file and row (ValueError)."""
    root = Path(data_dir) / "servegen-2025" / "m-small"
    files = sorted(root.glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
    if not files:
        raise OSError(f"no ServeGen files under {root}")
    fams, shapes = {}, {}
    for f in files:
        try:
            d = pd.read_csv(f, header=None, usecols=[0, 3, 4], names=["t", "pat", "arg1"], dtype={"pat": str})
        except (ValueError, pd.errors.ParserError) as exc:
            raise ValueError(f"{f}: not a ServeGen trace (timestamp,rate,cv,pat_name,pat_arg1,pat_arg2): {exc}") \
                from None
        pat = d["pat"].fillna("").str.strip()
        shape = pd.to_numeric(d["arg1"], errors="coerce").to_numpy(dtype=float)
        named = (pat != "").to_numpy()
        lo = pat.map(lambda p: SERVEGEN_SHAPES.get(p, (0.0, np.inf))[0]).to_numpy(dtype=float)
        hi = pat.map(lambda p: SERVEGEN_SHAPES.get(p, (0.0, np.inf))[1]).to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            off = ~np.isfinite(shape) | ~(shape > 0) | (shape < lo) | (shape > hi)
        bad = named & (~pat.isin(SERVEGEN_FAMILIES).to_numpy() | off)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            p, arg = pat.iloc[i], str(d["arg1"].iloc[i])
            if p not in SERVEGEN_FAMILIES:
                what = f"pat_name {p!r} is not one of {', '.join(SERVEGEN_FAMILIES)}"
            elif not (np.isfinite(shape[i]) and shape[i] > 0):
                what = f"pat_arg1 {arg!r} is not a number > 0"
            else:
                what = (f"pat_arg1 {arg!r} is not a {p} shape from {lo[i]:g} to {hi[i]:g} (past them its drawn "
                        "inter-arrivals overflow a float)")
            raise ValueError(f"{f}: row {i + 1}: {what}")
        at = SERVEGEN_EPOCH + pd.to_timedelta(pd.to_numeric(d["t"], errors="coerce"), unit="s")
        name = f"servegen-{f.name.split('-')[1]}"
        fams[name] = pd.Series(pat.to_numpy(dtype=object), index=at)
        shapes[name] = pd.Series(np.where(named, shape, np.nan), index=at)
    fam, shp = pd.DataFrame(fams).sort_index(), pd.DataFrame(shapes).sort_index()
    for frame in (fam, shp):
        frame.index.name, frame.columns.name = "time", "tenant"
    return fam.fillna(""), shp


def servegen_gaps(rate: pd.DataFrame) -> pd.Series:
    """Per window: True where every client's rate is 0 at once (a gap in the collection), in a trace that has load
    elsewhere (``servegen_windows``' docstring)."""
    total = rate.fillna(0.0).sum(axis=1)
    return (rate.fillna(0.0) <= 0).all(axis=1) & bool((total > 0).any())
