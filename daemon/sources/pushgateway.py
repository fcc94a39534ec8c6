"""Pushgateway groups that pass as the exporter's (or the ingress') series, and how their series are left out.

A Pushgateway is scraped with honor_labels (its documented setup), so a pushed series keeps the job label its push
names (POST /metrics/job/dcgm-exporter gives job="dcgm-exporter"), and anyone who can reach it (a tenant's batch job,
which is what it is for) can push DCGM names with any namespace, node and GPU. The Pushgateway adds
push_time_seconds to every group it holds, with the group's labels (job, instance and the rest of the push's path);
a push cannot leave it out, replace it, or give its series another job than the group's.

Measured on a real Pushgateway (1.5.1) and Prometheus (tests/integration/test_prometheus_pushgateway.py):
- a group whose path names an instance (/metrics/job/dcgm-exporter/instance/x) gives that instance to every one of its
  series, over any instance the push's body names: `instance!~"x"` beside the exporter's matchers leaves all of
  them out, and nothing else but a real exporter scraped as instance "x" (a collision);
- a group whose path names none has push_time_seconds without an instance, and so have those of its series whose
  body names none; but a series whose body names an instance keeps it (any value, a real exporter's too), so no
  matcher tells such a series from the exporter's. Its series cannot be left out: while such a group stands the
  read is refused whole, as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from daemon.config.promql_selectors import label_matchers

PUSHED_METRIC = "push_time_seconds"
PUSH_GROUP_LABELS = ("job", "instance")   # the labels a push group and each of its series surely share
ANY_JOB = "gpuas-probe-any-scrape-job"   # a job no site names: a selector passing it takes every scrape job's series
# Past these the groups' series are not left out one by one (the regex grows with every group, and every query
# carries it): the whole read is refused, as for a group without an instance.
MAX_GROUPS = 50
MAX_REGEX_CHARS = 2048
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _passes(m: Any, value: str) -> bool:
    """Whether matcher `m` passes a label `value`, as Prometheus reads it (a regex is anchored at both ends)."""
    if m.op in ("=", "!="):
        return (value == m.value) == (m.op == "=")
    try:
        return bool(re.fullmatch(m.value, value)) == (m.op == "=~")
    except re.error:
        return False


def pushed_selector(exporter_selector: str) -> str | None:
    """The PromQL selector of the Pushgateway groups whose series pass `exporter_selector` as the exporter's: its
    matchers on job and instance (every pushed series has its group's), or all of them where it has none of those
    (then a group whose series carry more labels than its path may go unseen: select the exporter by job). None where
    its job matchers pass any job and none names the instance (`job=~".+"`, the documented way of counting every
    scrape job knowingly): every group would pass, a backup job's metrics too, and the site has chosen to count them."""
    ms = sorted(label_matchers(exporter_selector))
    jobs = [m for m in ms if m.name == "job"]
    if jobs and all(_passes(m, ANY_JOB) for m in jobs) and not any(m.name == "instance" for m in ms):
        return None
    kept = [m for m in ms if m.name in PUSH_GROUP_LABELS] or ms
    return PUSHED_METRIC + "{" + ", ".join(f"{m.name}{m.op}{json.dumps(m.value)}" for m in kept) + "}"


def instance_regex(instances: tuple[str, ...]) -> str:
    """An RE2 alternation matching exactly `instances` (each escaped: `a.b` must not match `aXb`), as a PromQL
    string literal."""
    return json.dumps("|".join(_RE2_SPECIAL.sub(r"\\\1", i) for i in instances))


def shown_group(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"


@dataclass(frozen=True)
class Pushed:
    """The Pushgateway groups that pass a selector at the time (or in the window) read: the instances their paths
    name, whose series are left out (`excluded`), and why they cannot be (`whole`: a group without an instance, or
    past the bounds; then the read is refused whole, as before)."""

    groups: tuple[dict[str, str], ...] = ()
    instances: tuple[str, ...] = ()
    whole: str | None = None

    @classmethod
    def of(cls, groups: list[dict[str, str]]) -> "Pushed":
        groups = [{k: v for k, v in g.items() if k != "__name__"} for g in groups]
        instances = tuple(sorted({g["instance"] for g in groups if g.get("instance")}))
        bare = [g for g in groups if not g.get("instance")]
        whole = None
        if bare:
            whole = (f"{len(bare)} of them (first: {shown_group(bare[0])}) name no instance in their path, and a "
                     "series of such a group keeps any instance its push gives it (a real exporter's too), so it "
                     "cannot be told from the exporter's")
        elif len(instances) > MAX_GROUPS:
            whole = f"their {len(instances)} instances are over the {MAX_GROUPS} left out one by one"
        elif len(instance_regex(instances)) > MAX_REGEX_CHARS:
            whole = f"their instances' names are over the {MAX_REGEX_CHARS} characters left out one by one"
        return cls(tuple(groups), instances, whole)

    def excluded(self) -> str:
        """The matcher added to the selector so that the groups' series are left out ("" when none)."""
        return f"instance!~{instance_regex(self.instances)}" if self.instances else ""

    def only(self) -> str:
        """The matcher that reads only the series at the groups' instances (theirs, and a real exporter's that
        shares one)."""
        return f"instance=~{instance_regex(self.instances)}"


def pushed_refusal(shown_url: str, selector: str, groups: list[dict[str, str]], what: str,
                   whose: str = "the DCGM exporter", why: str | None = None) -> str:
    """The one line saying that Pushgateway groups pass as the exporter's (or the ingress') series, naming the
    first and what is refused, and (`why`) why their series could not be left out alone."""
    forged = "GPUs, demand and nodes" if whose == "the DCGM exporter" else "request rates"
    names = "the DCGM names (and the recording rules' names)" if whose == "the DCGM exporter" else \
        "the ingress' metric names"
    because = f" ({why})" if why else ""
    return (f"prometheus {shown_url}: {len(groups)} Pushgateway group(s) push series that the selector "
            f"{selector!r} takes for {whose}'s (first: {shown_group(groups[0])}){because}: whoever can push there "
            f"can forge {forged} for any tenant; {what}. Drop {names} on the Pushgateway's scrape job "
            "(metric_relabel_configs) and delete the group")


def left_out_line(push: Pushed, nodes: tuple[str, ...] | None = None) -> str:
    """The WARNING line naming the groups left out and what it costs: for the exporter (`nodes`: the nodes the
    series at their instances name) the GPUs there and their tenants, for the ingress (None) its tenants' rates."""
    n = len(push.groups)
    head = (f"{n} Pushgateway group{'s' * (n != 1)} passing as the {'exporter' if nodes is not None else 'ingress'}"
            f"'s series ({', '.join(shown_group(g) for g in push.groups[:5])}) left out: instance(s) "
            f"{', '.join(push.instances[:10])}")
    if nodes is None:
        return (f"{head}; the request rates of the tenants with series there are unknown while they stand. Drop "
                "the ingress' metric names on the Pushgateway's scrape job (metric_relabel_configs) and delete the "
                "group(s)")
    where = f"node(s) {', '.join(nodes[:10])}" if nodes else "no node's series are there"
    return (f"{head}. GPUs there are not counted and the tenants with GPUs there are missing while they stand: "
            f"{where}. Drop the DCGM names on the Pushgateway's scrape job (metric_relabel_configs) and delete the "
            "group(s)")


def add_back(keys: dict, rows: np.ndarray, at_keys: dict, at_rows: np.ndarray,
             stood: np.ndarray) -> tuple[np.ndarray, dict[object, np.ndarray]]:
    """(rows, touched) of a grid read with the groups' series left out (`keys`, `rows`; keys added in place), given
    the grid of the series at the groups' instances (`at_keys`, `at_rows`) and the steps where a group stood.

    Where no group stood, the series at those instances are the exporter's (a real exporter scraped under that
    instance, between pushes): added back. Where one stood, they cannot be told from the pushed ones: left out, and
    each key with a sample above 0 there is `touched` (its steps): its numbers there are not known (a tenant on a
    node whose exporter a group's instance names reads as missing, never as the rest of its GPUs)."""
    touched: dict[object, np.ndarray] = {}
    n = rows.shape[1]
    for k, r in at_keys.items():
        seen = ~np.isnan(at_rows[r])
        back = seen & ~stood
        if back.any():
            if k not in keys:
                keys[k] = len(keys)
                rows = np.vstack([rows, np.full((1, n), np.nan)])
            row = rows[keys[k]]
            rows[keys[k]] = np.where(back, np.nan_to_num(row) + np.nan_to_num(at_rows[r]), row)
        hit = seen & stood & (np.nan_to_num(at_rows[r]) > 0)
        if hit.any():
            touched[k] = hit
    return rows, touched
