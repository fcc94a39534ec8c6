"""Whether the daemon's Slurm reads see the whole cluster (pure: the text of slurmctld's answers in, a verdict out).

The plan reads absence as fact: an account squeue lists no job for runs none (its metered GPUs capped to 0, another
cluster's), a tenant with none listed is idle, a reservation not listed is not there. Two things make slurmctld
leave things out without an error:

- a partition configured ``Hidden=YES``, or one the user's groups may not use (``AllowGroups``): squeue, sinfo and
  scontrol leave out its jobs (and the nodes in no other partition) unless asked ``--all`` / ``-a``; root and
  SlurmUser see them anyway. The actuator's reads all ask (ALL_JOBS, ALL_NODES), so this module is not needed for it.
- ``PrivateData=jobs`` (or ``reservations``) in slurm.conf: a user that is not root, SlurmUser or an operator
  (AdminLevel Operator or Administrator in the accounting database) sees only its own jobs (its own usable
  reservations), ``--all`` or not (``man slurm.conf``, PrivateData; slurmctld's validate_operator). Every other
  tenant would read as idle and its nodes' GPUs as nobody's. The daemon cannot ask for more, so it refuses the read
  (sees_all_line) and keeps its last plan. ``PrivateData=nodes`` needs nothing here: slurmctld refuses that read
  with an error (``Access/permission denied``), which the view reports as any failed read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# squeue's --all, sinfo's and scontrol's -a: hidden partitions' jobs and nodes, and those of partitions the user's
# groups may not use, are listed too (man squeue: --all; they are left out by default for anyone but root and
# SlurmUser). It costs nothing else: it lists the same jobs plus those, and in a federation the sibling copies of
# a job in state REVOKED, which no reader keeps (they read RUNNING, PENDING, SUSPENDED and COMPLETING only)
ALL_JOBS = "--all"
ALL_NODES = "-a"
# the PrivateData values whose records slurmctld drops silently for a user without the right: their absence
# would read as a fact (an idle tenant, a free node, no hold of ours)
SILENT = ("jobs", "reservations")
PRIVILEGED = ("operator", "administrator")   # AdminLevel values that see everything (validate_operator)
# what the daemon's user would see of each SILENT kind, and what the plan would make of it
UNSEEN = {"jobs": ("only its own jobs", "every other tenant would read as idle and its GPUs as free"),
          "reservations": ("only the reservations it may use",
                           "the daemon's holds and other reservations would read as absent")}


@dataclass(frozen=True)
class CtldConfig:
    """What ``scontrol show config`` says about who sees what."""
    private: frozenset[str]           # PrivateData's values, lower case (empty: none)
    slurm_user: str                   # SlurmUser's name
    slurm_uid: int | None             # and uid, as it prints them: slurm(64030)


def parse_config(out: str) -> CtldConfig:
    """``scontrol show config``'s ``Key = value`` lines: PrivateData (``jobs,nodes``, ``none`` or ``(null)``) and
    SlurmUser (``name(uid)``)."""
    kv: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip().lower()] = value.strip()
    private = {v.strip().lower() for v in kv.get("privatedata", "").split(",")} - {"", "none", "(null)"}
    m = re.fullmatch(r"(.*?)\((\d+)\)", kv.get("slurmuser", ""))
    user, uid = (m.group(1), int(m.group(2))) if m else (kv.get("slurmuser", ""), None)
    return CtldConfig(frozenset(private), user, uid)


def parse_admin_level(out: str, user: str) -> str:
    """The AdminLevel slurmctld holds for `user` (``scontrol show assoc_mgr flags=users users=<user>``: lines
    ``UserName=<name>(<uid>) DefAccount=.. DefWckey=.. AdminLevel=Operator``), lower case; "" where it holds no
    record of the user (no accounting database: then only root and SlurmUser see everything)."""
    for line in out.splitlines():
        m = re.search(r"UserName=(\S*?)\(\d+\).*\bAdminLevel=(\S+)", line)
        if m and m.group(1) == user:
            return m.group(2).lower()
    return ""


def hides(cfg: CtldConfig) -> list[str]:
    """The PrivateData values in force that slurmctld applies without an error (SILENT), in slurm.conf's spelling."""
    return [k for k in SILENT if k in cfg.private]


def privileged(cfg: CtldConfig, uid: int, admin_level: str = "") -> bool:
    """root, SlurmUser and operators see every record whatever PrivateData says."""
    return uid == 0 or uid == cfg.slurm_uid or admin_level in PRIVILEGED


def sees_all_line(cfg: CtldConfig, uid: int, user: str, admin_level: str) -> str | None:
    """None when the daemon's user sees every job and reservation; else the one line that refuses the read: the
    setting, who the daemon runs as, what it would have read, and the two fixes."""
    hidden = hides(cfg)
    if not hidden or privileged(cfg, uid, admin_level):
        return None
    setting = "PrivateData=" + ",".join(hidden)
    unseen = " and ".join(UNSEEN[k][0] for k in hidden)
    so = "; ".join(UNSEEN[k][1] for k in hidden)
    return (f"slurmctld shows {user} (uid {uid}) {unseen}: slurm.conf has {setting} and {user} is not SlurmUser "
            f"({cfg.slurm_user or '?'}), root or a Slurm operator (AdminLevel "
            f"{admin_level.capitalize() if admin_level else 'not set'}), so {so}: the jobs are not read and the last "
            f"plan is kept. Run the daemon as SlurmUser, or make {user} an operator: sacctmgr modify user {user} set "
            "adminlevel=operator")
