"""The shadow report's tier rows and throttled figure (issue 37): a tier's cycles are cycles, not a sum over its
tenants; "throttled" is what the API calls throttled (a limit tightened by load or fixed by an operator), the
request-rate figure is apart; and the terminal table has a legend of its columns."""

import pytest
from starlette.testclient import TestClient

from daemon.shadow import report
from daemon.shadow.record import NUMERIC
from daemon.shadow.report import shadow_report, table
from tests.shadow.test_shadow_report import rec, t


def _records(n: int = 4) -> list[dict]:
    # three high tenants every cycle; one of them held for in cycles 0 and 1, another in cycle 1; level 1 in cycle 2
    out = []
    for k in range(n):
        lvl = 1 if k == 2 else 0
        out.append(rec(k, {"a": t("high", 2, hold=8 if k < 2 else 0, level=lvl),
                           "b": t("high", 2, hold=8 if k == 1 else 0, level=lvl),
                           "c": t("high", 2, level=lvl), "lo": t("low", 1, level=lvl)}))
    return out


def test_a_tiers_cycles_are_cycles_not_a_sum_over_its_tenants():
    rep = shadow_report(_records())
    hi = rep["tiers"]["high"]
    assert rep["cycles"] == 4
    assert hi["cycles"] == 4 and hi["tenants"] == 3             # was 12: 3 tenants x 4 cycles
    assert hi["hold_cycles"] == 2                                # cycles 0 and 1 (3 tenant-cycles)
    assert hi["held_gpu_cycles"] == 24                           # GPU-cycles stay a sum
    assert hi["tightened_share"] == pytest.approx(1 / 4)
    assert rep["tiers"]["low"]["cycles"] == 4
    assert sum(a["hold_cycles"] for n, a in rep["tenants"].items() if a["tier"] == "high") == 3
    # a tenant's own view: its tier row is its own figures
    mine = shadow_report(_records(), tenant="b")
    assert mine["tiers"]["high"]["cycles"] == 4 and mine["tiers"]["high"]["hold_cycles"] == 1


def _v2(k: int, reason_of: dict[str, str], level: int = 0) -> dict:
    """A version-2 (column-wise) record, as daemon/shadow/record.py writes it, with each tenant's limit reason."""
    names = list(reason_of)
    reasons = list(dict.fromkeys(reason_of.values()))
    r = rec(k, {})
    del r["tenants"]
    cols = {key: [0.0] * len(names) for key in NUMERIC}
    cols["rate"] = [100.0] * len(names)
    cols["request_rate"] = [None] * len(names)
    cols["level"] = [level] * len(names)
    cols["tier"] = ["normal"] * len(names)
    cols["limit_reason"] = [reasons.index(reason_of[n]) for n in names]
    return {**r, "v": 2, "names": names, "cols": cols, "reasons": reasons}


def test_throttled_counts_an_operators_fixed_limit_as_the_api_does_and_no_request_rate_is_none():
    """Before: the page's "throttled" was the share of cycles with requests over the limit, '–' on every source
    that reports no request rates, while the API said "throttled": true."""
    recs = [_v2(k, {"fx": "fixed limit for fx: 5 req/s", "free": "normal operation: normal tier limit 100 req/s"})
            for k in range(3)]
    rep = shadow_report(recs)
    assert rep["tenants"]["fx"]["tightened_share"] == 1.0
    assert rep["tenants"]["free"]["tightened_share"] == 0.0
    assert rep["tenants"]["fx"]["throttled_share"] is None      # no request rates: not reported, not 0
    assert rep["tiers"]["normal"]["tightened_share"] == 1.0     # a cycle with one of its tenants throttled
    v1 = shadow_report([rec(0, {"fx": {**t("normal", 1), "limit_reason": "fixed limit for fx: 5 req/s"}})])
    assert v1["tenants"]["fx"]["tightened_share"] == 1.0


def test_the_terminal_table_has_a_legend_of_every_column():
    text = table(shadow_report(_records()))
    head = text.splitlines()[1].split()
    assert head[0] == "tier"
    legend = text[text.index("columns:"):]
    for col in head[1:]:
        assert f"  {col} " in legend, col
    assert {k for k, _ in getattr(report, "LEGEND", ())} == set(head[1:])
    row = next(line for line in text.splitlines() if line.startswith("tier high"))
    assert row.split()[3] == "4"                                 # the tier's cycles
    # a '-' under covPk is said: `shadow-report --last 30` (horizon 60) showed '-' for every row, unexplained
    assert "(- until a decision's whole horizon is among the records read" in legend


def test_the_shadow_page_shows_throttled_as_the_api_says_and_tier_cycles():
    import re

    from daemon.config import Config
    from daemon.web.app import build_app
    from daemon.web.backend import Snapshot
    from tests.support.daemons import OP
    from tests.support.web_backend import SnapshotBackend, with_tokens

    recs = _records()
    for r in recs:  # throttled (level 1) every cycle; no request rates
        for d in r["tenants"].values():
            d["level"] = 1
    snap = Snapshot(cfg=with_tokens(Config()), plan=None, state=None, cycle=1)
    client = TestClient(build_app(SnapshotBackend(snap, recs)))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/shadow").text
    row = text[text.index('id="tier-high"'):]
    row = row[:row.index("</tr>")]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[2] == "4" and cells[3] == "2"    # its cycles, and cycles with a hold: 2, not 3 tenant-cycles
    assert 'class="num throttled">100%' in row and "not reported" in row


def test_the_shadow_page_has_a_cycles_column_for_tiers_and_tenants():
    """The page's footnote explained a tier's cycles, and docs/own-cluster.md lists a `cycles` column, but neither
    table had one, so "cycles with a hold" had no count to be read against (found on `make run`)."""
    import re

    from daemon.config import Config
    from daemon.web.app import build_app
    from daemon.web.backend import Snapshot
    from tests.support.daemons import OP
    from tests.support.web_backend import SnapshotBackend, with_tokens

    recs = _records()
    del recs[0]["tenants"]["c"]                                   # c is named in 3 of the 4 cycles
    snap = Snapshot(cfg=with_tokens(Config()), plan=None, state=None, cycle=1)
    client = TestClient(build_app(SnapshotBackend(snap, recs)))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/shadow").text

    def header(table: str) -> list[str]:
        part = text[text.index(f'id="{table}"'):]
        row = part[:part.index("</tr>")]
        return [re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", row)]

    def cells(row_id: str) -> list[str]:
        row = text[text.index(f'id="{row_id}"'):]
        row = row[:row.index("</tr>")]
        return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]

    assert header("shadow-tiers")[:4] == ["tier", "", "cycles", "cycles with a hold"]
    assert header("shadow-tenants")[:4] == ["tenant", "tier", "cycles", "cycles with a hold"]
    assert cells("tier-high")[:4] == ["high", "", "4", "2"]       # each cycle once, 2 of them with a hold
    assert cells("tenant-c")[:4] == ["c", "high", "3", "0"]
    assert cells("tenant-a")[:4] == ["a", "high", "4", "2"]
    assert len(header("shadow-tiers")) == len(cells("tier-high"))
    assert len(header("shadow-tenants")) == len(cells("tenant-a"))
