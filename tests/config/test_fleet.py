"""The fleet's resource model: model names normalised to types, what a job accepts, and bad [fleet] config."""

from __future__ import annotations

import pytest

from daemon.config import (
    ANY,
    DEFAULT_TYPE,
    UNKNOWN_TYPE,
    ConfigError,
    FleetConfig,
    TypeResolver,
    accepts_type,
    parse_config,
)


def _fleet() -> TypeResolver:
    return FleetConfig(types=["h100", "a100", "t4", "mig-1g.10gb"],
                       aliases={"NVIDIA H100 80GB HBM3": "h100", "NVIDIA A100-SXM4-80GB": "a100",
                                "Tesla T4": "t4"}).resolver()


def test_every_source_spelling_of_one_model_is_one_type():
    r = _fleet()
    assert r("NVIDIA H100 80GB HBM3") == "h100"          # DCGM modelName
    assert r("NVIDIA-H100-80GB-HBM3") == "h100"          # nvidia.com/gpu.product label
    assert r("nvidia a100-sxm4-80gb") == "a100"
    assert r("A100") == "a100"                           # Slurm GRES type, a type's own name
    assert r("nvidia.com/mig-1g.10gb") == "mig-1g.10gb"  # a MIG resource is a type of its own
    assert r.unmatched == set()


def test_an_unknown_model_is_typed_unknown_and_reported_never_dropped():
    r = _fleet()
    assert r("NVIDIA L40S") == UNKNOWN_TYPE
    assert r("") == UNKNOWN_TYPE
    assert r.unmatched == {"NVIDIA L40S", ""}


def test_a_cluster_without_types_is_one_pool_as_before():
    r = FleetConfig().resolver()
    assert not FleetConfig().typed
    assert r("NVIDIA H100 80GB HBM3") == r("whatever") == r(None) == DEFAULT_TYPE
    assert r.unmatched == set()


def test_what_a_job_accepts_keeps_its_order_and_any_is_any():
    r = FleetConfig(types=["v100m16", "v100m32", "t4", "g2", "p100"]).resolver()
    assert r.accepts("V100M16|V100M32") == ("v100m16", "v100m32")
    assert r.accepts("G2|P100|T4|V100M16|V100M32") == ("g2", "p100", "t4", "v100m16", "v100m32")
    assert r.accepts(["t4", "T4"]) == ("t4",)
    assert r.accepts(None) == r.accepts("") == r.accepts("*") == ANY
    assert accepts_type(ANY, "t4") and accepts_type(("t4",), "t4") and not accepts_type(("t4",), "g2")
    assert not accepts_type(r.accepts("L40S"), UNKNOWN_TYPE)  # nothing is reserved for a name nobody knows


def test_types_are_matched_ignoring_case_everywhere_in_the_fleet():
    # `type = "P100"` in a pool was refused though fleet.types has p100 (aliases and model names ignore case)
    f = parse_config({"fleet": {"types": ["P100", "t4"], "aliases": {"Tesla P100-PCIE": "P100"},
                                "reserve_share": {"T4": 0.5},
                                "pools": [{"type": "p100", "nodes": 1}, {"type": "T4", "nodes": 2}]}}).fleet
    assert f.types == ["p100", "t4"] and [p.type for p in f.pools] == ["p100", "t4"]
    assert f.reserve_share == {"t4": 0.5} and f.resolver()("TESLA P100 PCIE") == "p100"


@pytest.mark.parametrize("fleet, names", [
    ({"types": ["h100", "a100"], "aliases": {"NVIDIA H100": "h100", "nvidia-h100": "a100"}}, "fleet.aliases"),
    ({"types": ["h100"], "aliases": {"x": "a100"}}, "fleet.aliases"),
    ({"types": ["h100"], "reserve_share": {"h100": 1.5}}, "fleet.reserve_share.h100"),
    ({"types": ["h100"], "reserve_share": {"t4": 0.2}}, "fleet.reserve_share"),
    ({"types": ["h100", "H100"]}, "fleet.types: listed twice: ['h100']"),   # one type whatever its case
    ({"types": ["h 100"]}, "fleet.types"),
    ({"types": ["h100", "h100"]}, "fleet.types"),
    ({"types": ["unknown"]}, "fleet.types"),
    ({"types": ["h100"], "pools": [{"type": "t4", "nodes": 2}]}, "fleet.pools[0].type"),
])
def test_bad_fleet_config_is_one_line_naming_the_field(fleet, names):
    with pytest.raises(ConfigError) as e:
        parse_config({"fleet": fleet})
    msg = str(e.value)
    assert names in msg and "\n" not in msg.strip(), msg


def test_unknown_names_are_remembered_up_to_a_bound_and_the_rest_counted():
    """A pod's node selector is the tenant's to write: every new product name was kept for ever (1,010,000 after
    50 cycles). Past UNMATCHED_MAX new names are counted, not kept, and the warning says how many."""
    r = _fleet()
    reported: set[str] = set()
    for k in range(1500):
        assert r(f"NVIDIA-FAKE-{k}") == UNKNOWN_TYPE          # still typed unknown, never dropped from the count
    assert len(r.unmatched) < 1500

    from daemon.config.fleet import UNMATCHED_MAX

    assert UNMATCHED_MAX == 1000 and len(r.unmatched) == UNMATCHED_MAX and r.unmatched_dropped == 500
    assert r("NVIDIA-FAKE-3") == UNKNOWN_TYPE and r.unmatched_dropped == 500   # a kept name is no new one
    line = r.unreported(reported)
    assert line.endswith(f"; 500 more names not kept (over {UNMATCHED_MAX})") and len(reported) == UNMATCHED_MAX
    assert r.unreported(reported) is None                     # said once
    r("NVIDIA-FAKE-new")
    assert r.unreported(reported) == f"1 more names not kept (over {UNMATCHED_MAX})"
