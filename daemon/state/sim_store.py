"""The state store of a `run` on the embedded simulated cluster: its own, and started afresh each run.

Why: the simulator is a new cluster every run, its clock starting again at the same simulated time (the cycle
line's `sim 2026-01-12T13:30`). A store kept from an earlier run was restored into it (the last plan, the
policy's memory: holds of a cluster that no longer exists) and its plans, events and shadow records were shown
beside this run's under the same simulated times: a second `make run` drew the console's held-capacity chart
zigzagging between two runs, listed a tenant's events twice and counted both runs' cycles in the shadow report.

The earlier run's store is moved aside (`<stem>-previous<suffix>`, replacing an older one), not deleted, and so is
its history store (`history.path`, which the simulator writes as Prometheus does: another cluster's demand under the
same simulated times, read by the window proposals). A store that belongs to a real cluster (`run --sim` over a
config whose source is Prometheus) is never touched: the simulated run keeps its own beside it,
`<stem>-sim<suffix>`, its history store too (beside it by default; beside the configured `history.path` when one
is set).

A run holds an exclusive lock on `<store>.lock` for as long as it runs (the kernel drops it when the process ends,
however it ends). A second run over the same store while the first still runs is refused with one line before
anything is moved: moving a live run's database and its WAL from under it would leave it writing to the
"previous" copy while the new run started a store of its own.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from daemon.config import Config

# the locks of this process's simulated runs (store path -> fd), kept open (and so held) until the process ends
_held: dict[str, int] = {}


class StoreInUse(RuntimeError):
    """Another process runs the simulated cluster on this store."""


def _lock(path: Path) -> None:
    """Hold `<path>.lock` exclusively for the rest of this process, or raise StoreInUse naming it. Held once per
    process: flock is per open file, so a second open and lock here would refuse this process's own store."""
    if str(path) in _held:
        return
    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreInUse(f"another run of the simulated cluster uses the state store {path} (it holds {lock}); "
                         "stop it first, or give this one another state.path") from None
    _held[str(path)] = fd


# SQLite's files of one store: the database, and in WAL mode its log and shared-memory index beside it
_PARTS = ("", "-wal", "-shm")


def _path_with(path: Path, tag: str) -> Path:
    return path.with_name(f"{path.stem}-{tag}{path.suffix}")


def fresh_sim_store(cfg: Config, configured_kind: str) -> tuple[Config, str | None]:
    """`cfg` (whose source is the simulator) with the state path this simulated run keeps, the earlier run's store
    there moved aside; and a line saying what was done, None when there was nothing to move. `configured_kind` is
    the source the config file named before `--sim`: any other than the simulator's store is a real cluster's.
    Raises StoreInUse, moving nothing, while another process runs on that store."""
    path = cfg.state.path
    if configured_kind != "simulator":
        path = _path_with(path, "sim")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"path": path})})
        if cfg.history.path is not None:   # the real cluster's history store: the simulated run writes its own
            cfg = cfg.model_copy(update={"history": cfg.history.model_copy(
                update={"path": _path_with(cfg.history.path, "sim")})})
    _lock(path)
    history = cfg.history.path or path.with_name(f"{path.stem}-history.sqlite")   # as the wiring places it
    moved = _move_aside(path)
    _move_aside(history)
    if not moved:
        return cfg, None
    # the operator's changes live in the same store: a tenant's floor or a window declared through the API on the
    # previous run is not in force on this one, and the line said only "plans, events and shadow records"
    return cfg, (f"state: the simulated cluster starts afresh at {path}: the previous run's plans, events, shadow "
                 f"records and operator changes (overrides, windows declared through the API) are not carried over; "
                 f"they are kept in {_path_with(path, 'previous')}")


def _move_aside(path: Path) -> bool:
    """Move an SQLite store's files to `<stem>-previous<suffix>` (replacing an older one); False when it has none."""
    files = [Path(f"{path}{part}") for part in _PARTS]
    if not any(f.exists() for f in files):
        return False
    aside = _path_with(path, "previous")
    for f, part in zip(files, _PARTS):
        dest = Path(f"{aside}{part}")
        if f.exists():
            f.replace(dest)
        else:
            dest.unlink(missing_ok=True)  # never pair the earlier store with an older run's log
    return True
