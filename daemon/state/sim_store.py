"""The state store of a `run` on the embedded simulated cluster: its own, and started afresh each run.

Why: the simulator is a new cluster every run, its clock starting again at the same simulated time (the cycle
line's `sim 2026-01-06T13:30`). A store kept from an earlier run was restored into it (the last plan, the
policy's memory: holds of a cluster that no longer exists) and its plans, events and shadow records were shown
beside this run's under the same simulated times: a second `make run` drew the console's held-capacity chart
zigzagging between two runs, listed a tenant's events twice and counted both runs' cycles in the shadow report.

The earlier run's store is moved aside (`<stem>-previous<suffix>`, replacing an older one), not deleted. A store
that belongs to a real cluster (`run --sim` over a config whose source is Prometheus) is never touched: the
simulated run keeps its own beside it, `<stem>-sim<suffix>`.
"""

from __future__ import annotations

from pathlib import Path

from daemon.config import Config

# SQLite's files of one store: the database, and in WAL mode its log and shared-memory index beside it
_PARTS = ("", "-wal", "-shm")


def _path_with(path: Path, tag: str) -> Path:
    return path.with_name(f"{path.stem}-{tag}{path.suffix}")


def fresh_sim_store(cfg: Config, configured_kind: str) -> tuple[Config, str | None]:
    """`cfg` (whose source is the simulator) with the state path this simulated run keeps, the earlier run's store
    there moved aside; and a line saying what was done, None when there was nothing to move. `configured_kind` is
    the source the config file named before `--sim`: any other than the simulator's store is a real cluster's."""
    path = cfg.state.path
    if configured_kind != "simulator":
        path = _path_with(path, "sim")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"path": path})})
    files = [Path(f"{path}{part}") for part in _PARTS]
    if not any(f.exists() for f in files):
        return cfg, None
    aside = _path_with(path, "previous")
    for f, part in zip(files, _PARTS):
        dest = Path(f"{aside}{part}")
        if f.exists():
            f.replace(dest)
        else:
            dest.unlink(missing_ok=True)  # never pair the earlier store with an older run's log
    return cfg, (f"state: the simulated cluster starts afresh at {path} (the previous run's plans, events and "
                 f"shadow records are kept in {aside})")
