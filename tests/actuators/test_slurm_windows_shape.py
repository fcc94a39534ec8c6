"""A window's Slurm reservation for a tenant whose jobs ask several nodes each (-N 2 --gres=gpu:4): its whole nodes
are picked where such a job starts, within the window's GPUs rounded up to whole nodes, and where none fit the
report says so (daemon/actuators/slurm/windows.py, SlurmWindows._choose). Pure: scontrol is a fake."""

import datetime as dt

from daemon.actuators.base import ActionReport
from daemon.actuators.slurm.holds import Node, SlurmHolds
from daemon.actuators.slurm.windows import SlurmWindows
from daemon.config import WindowConfig

NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.timezone.utc)


def windows() -> tuple[SlurmWindows, list[tuple[str, ...]]]:
    sent: list[tuple[str, ...]] = []

    def scontrol(rep, *args):
        sent.append(args)
        return True

    holds = SlurmHolds(read=lambda *a: "", scontrol=scontrol, accounts={"h": "acct-high", "l": "acct-low"},
                       tier_of={"h": "high", "l": "low"}, tiers=["high"], prefix="gpuas", shrink_delay_s=0)
    return SlurmWindows(read=lambda *a: "", scontrol=scontrol, holds=holds, prefix="gpuas-win",
                        clock=NOW.timestamp), sent


def window(gpus: int) -> WindowConfig:
    return WindowConfig.model_validate({"name": "w", "tenant": "h", "gpus": gpus, "timezone": "UTC",
                                        "every": "daily", "at": "14:00", "duration_minutes": 60})


def made(sent) -> str:
    (create,) = [a for a in sent if a[:2] == ("create", "reservation")]
    return next(x for x in create if x.startswith("Nodes="))


def test_a_window_for_jobs_on_several_nodes_takes_nodes_they_start_on_within_its_gpus():
    """Nodes gn1 of 16 GPUs, gn2 and gn3 of 8, all free; the tenant's largest job is -N 2 --gres=gpu:4. A 16-GPU
    window took gn1 alone (the most free GPUs rank first), where a job on 2 nodes never starts; now gn2 and gn3
    (16 GPUs too). Without the shape it is gn1 still."""
    nodes = [Node("gn1", "IDLE", 16, 0), Node("gn2", "IDLE", 8, 0), Node("gn3", "IDLE", 8, 0)]
    w, sent = windows()
    rep = ActionReport("slurm", False)
    w.apply([window(16)], rep, [], "", nodes, shapes={"acct-high": (2, 4)})
    assert made(sent) == "Nodes=gn2,gn3", rep.actions
    assert not any("cannot start" in a for a in rep.actions), rep.actions
    w, sent = windows()
    w.apply([window(16)], ActionReport("slurm", False), [], "", nodes)
    assert made(sent) == "Nodes=gn1"


def test_a_window_too_small_for_its_tenants_jobs_on_several_nodes_says_so_and_takes_no_more_gpus():
    """8-GPU nodes, a window of 8 GPUs, the tenant's jobs -N 2 --gres=gpu:4: two nodes (16 GPUs) would start one,
    but the window's GPUs are the operator's: it stays one whole node, and the report says its tenant's jobs cannot
    start there and that a window of 16 GPUs would hold one."""
    nodes = [Node(f"gn{i}", "IDLE", 8, 0) for i in (1, 2, 3)]
    w, sent = windows()
    rep = ActionReport("slurm", False)
    w.apply([window(8)], rep, [], "", nodes, shapes={"acct-high": (2, 4)})
    assert made(sent) == "Nodes=gn1"
    assert "window gpuas-win-w: its tenant's jobs ask 2 nodes of 4 GPUs each, which 8 GPUs in whole nodes (1 node) " \
        "cannot start; a window of 16 GPUs would hold one" in rep.actions, rep.actions
