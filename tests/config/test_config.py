import subprocess
import sys

import pytest
from pydantic import ValidationError

from daemon.config import Config, ConfigError, load_config, parse_config


def test_default_is_the_simulated_cluster():
    cfg = load_config(None)
    assert cfg.source.kind == "simulator"
    assert cfg.policy.reserve_share == 0.2
    assert [lvl.load for lvl in cfg.ratelimits.levels] == [0.0, 0.8, 0.9]
    assert cfg.ratelimits.levels[1].normal == 50 and cfg.ratelimits.levels[1].high == 200
    assert cfg.ratelimits.levels[2].low == 50 and cfg.ratelimits.levels[1].low == 100


def test_full_file_round_trip(tmp_cfg):
    p = tmp_cfg("""
[cluster]
gpus = 4096
[[tenants]]
name = "llm-serving"
tier = "high"
[[tenants]]
name = "research"
tier = "low"
[policy]
reserve_share = 0.3
[source]
kind = "prometheus"
[source.prometheus]
url = "http://127.0.0.1:9999"
""")
    cfg = load_config(p)
    assert cfg.cluster.gpus == 4096
    assert cfg.tier_of("llm-serving") == "high" and cfg.tier_of("unknown") == "normal"
    assert cfg.source.prometheus.url.endswith("9999")


@pytest.mark.parametrize("text, key", [
    ("[policy]\nreserve_shar = 0.2\n", "policy.reserve_shar: unknown key"),
    ("[policy]\nreserve_share = 1.5\n", "policy.reserve_share"),
    ("[cycle]\ninterval_s = -1\n", "cycle.interval_s"),
    ("[source]\nkind = 'graphite'\n", "source.kind"),
    ("[[tenants]]\nname='a'\ntier='gold'\n", "tenants.0.tier"),
    ("[ratelimits]\nlevels = [{load=0.5, high=1, normal=1, low=1}]\n", "ratelimits.levels"),
    ("[[tenants]]\nname='a'\n[[tenants]]\nname='a'\n", "duplicate tenant names"),
    # a string or a number is not a boolean: "no" was read as false, and every non-empty string as true
    ("[actuators]\ndry_run = 'no'\n", "actuators.dry_run: must be true or false (unquoted), not 'no'"),
    ("[actuators]\ndry_run = 0\n", "actuators.dry_run: must be true or false (unquoted), not 0"),
    ("[source.prometheus]\nrecording_rules = 'true'\n", "source.prometheus.recording_rules: must be true or false"),
    ("[retrain]\nenabled = 'yes'\n", "retrain.enabled: must be true or false"),
    # inf passed gt=0 and then killed the cycle thread; a duration past ten years overflows the threads' waits
    ("[cycle]\ninterval_s = inf\n", "cycle.interval_s: Input should be a finite number"),
    ("[cycle]\nstale_after_s = nan\n", "cycle.stale_after_s: Input should be a finite number"),
    ("[policy]\nreserve_share = nan\n", "policy.reserve_share: Input should be a finite number"),
    ("[cycle]\ninterval_s = 1e300\n", "cycle.interval_s: 1e+300 is longer than ten years: a typo?"),
    ("[ha]\nlease_ttl_s = 1e12\n", "ha.lease_ttl_s: 1e+12 is longer than ten years"),
    ("[health]\nidle_warn_minutes = 1e9\nidle_action_minutes = 1e9\n", "health.idle_warn_minutes: 1e+09 is longer"),
    ("[state]\nevents_keep_days = 1e5\n", "state.events_keep_days: 100000 is longer than ten years"),
])
def test_errors_name_the_key(tmp_cfg, text, key):
    with pytest.raises(ConfigError) as e:
        load_config(tmp_cfg(text))
    assert key in str(e.value) and "\n" not in str(e.value)


def _same_hash(variants):
    """Two names of `variants` whose SHA-1 starts alike (six hex digits): found by search, a birthday in 2^24."""
    import hashlib

    seen = {}
    for v in variants:
        h = hashlib.sha1(v.encode()).hexdigest()[:6]
        if h in seen:
            return seen[h], v
        seen[h] = v
    raise AssertionError("no clash found")


def test_tenants_whose_hold_names_would_be_one_are_refused_naming_both(tmp_cfg):
    # issue 36: only a clash of the six-digit hash can give two tenants one hold now; the config says which two
    import itertools

    a, b = _same_hash("ml" + "".join(c) for c in itertools.product(" !*#$%^&", repeat=6))   # Slurm: "ml______-<h>"
    with pytest.raises(ConfigError) as e:
        load_config(tmp_cfg(f"[[tenants]]\nname={a!r}\n[[tenants]]\nname={b!r}\n"))
    assert "Slurm hold" in str(e.value) and repr(a) in str(e.value) and repr(b) in str(e.value)
    c, d = _same_hash("".join(x) for x in itertools.product(*[(ch, ch.upper()) for ch in "teamalphabetsoup"]))
    with pytest.raises(ConfigError) as e:                                                    # Kubernetes: lower case
        load_config(tmp_cfg(f"[[tenants]]\nname={c!r}\n[[tenants]]\nname={d!r}\n"))
    assert "Kubernetes name" in str(e.value) and repr(c) in str(e.value) and repr(d) in str(e.value)
    # a tenant named like another's hashed hold is its own tenant, not a clash (see test_slurm_holds)
    assert len(load_config(tmp_cfg("[[tenants]]\nname='ml team'\n[[tenants]]\nname='ml_team-b4aa16'\n")).tenants) == 2


def test_the_bounds_leave_real_values_alone():
    cfg = parse_config({"actuators": {"dry_run": False}, "cycle": {"interval_s": 30, "forget_tenant_after_s": 86400},
                        "state": {"events_keep_days": 3650}, "policy": {"preempt_drain_s": None}})
    assert cfg.actuators.dry_run is False and cfg.cycle.interval_s == 30.0 and cfg.state.events_keep_days == 3650


def test_a_deeply_nested_config_is_one_line(tmp_cfg):
    # tomllib recurses once per level: this raised RecursionError out of load_config
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(tmp_cfg("a = " + "[" * 100_000 + "]" * 100_000 + "\n"))


def test_not_toml(tmp_cfg):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_cfg("[policy\nx=1"))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")


def test_cli_config_error_is_one_line_exit_2(tmp_cfg):
    p = tmp_cfg("[policy]\nreserve_share = 'lots'\n")
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(p), "plan"], capture_output=True, text=True)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if "config error" in ln]
    assert len(lines) == 1 and "policy.reserve_share" in lines[0]


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(ValidationError, match="frozen"):
        cfg.policy.reserve_share = 0.5  # type: ignore[misc]


def test_slurm_must_enforce_every_hold_the_plan_makes():
    """Enforce what you plan: the plan (and the simulator) hold GPUs for every tier, so a Slurm actuator that
    would hold only some tiers, or none, is refused with the key named."""
    with pytest.raises(ConfigError, match=r"actuators.slurm.hold_tiers: \['normal', 'low'\] left out"):
        parse_config({"actuators": {"enabled": ["slurm"], "slurm": {"hold_tiers": ["high"]}}})
    with pytest.raises(ConfigError, match="actuators.slurm.holds: false"):
        parse_config({"actuators": {"enabled": ["slurm"], "slurm": {"holds": False}}})
    cfg = parse_config({"actuators": {"enabled": ["slurm"], "slurm": {"hold_tiers": ["low", "normal", "high"]}}})
    assert cfg.actuators.slurm.holds
    # without the Slurm actuator the section is not used, so it is not held against the config
    parse_config({"actuators": {"enabled": ["log"], "slurm": {"holds": False}}})


def test_holt_winters_needs_two_seasons_of_history():
    """forecaster.kind = 'ets' on the default 2 days of 1-minute history would forecast the last value with no
    spread under Holt-Winters' name: refused at startup with both keys named."""
    with pytest.raises(ConfigError, match=r"forecaster.kind = 'ets' needs cycle.history_steps >= 2910 .* it is 2880"):
        parse_config({"forecaster": {"kind": "ets"}})
    cfg = parse_config({"forecaster": {"kind": "ets"}, "cycle": {"history_steps": 2910}})
    assert cfg.forecaster.kind == "ets"


def test_every_actuator_takes_a_pooled_high_tier_hold():
    """Slurm pools as one reservation, Kueue as one pool flavor in a Cohort of the pooled tenants' queues
    (tests/actuators/test_k8s_kueue.py); the default (pooled) is accepted with either, and per tenant too."""
    for enabled in (["log", "kueue"], ["log", "slurm"], ["kubernetes", "kueue"]):
        assert parse_config({"actuators": {"enabled": enabled}}).policy.pool_high_tier
    cfg = parse_config({"actuators": {"enabled": ["log", "kueue"]}, "policy": {"pool_high_tier": False}})
    assert not cfg.policy.pool_high_tier


def test_a_key_this_version_does_not_read_is_accepted_and_said_once_per_load(caplog):
    """source.prometheus.util_query stays valid (old files load) but does nothing: setting it says so in one
    WARNING line naming it; leaving it out says nothing. (nodes_query is read: silent exporters, mark_silent.)"""
    from daemon.config import parse_config

    with caplog.at_level("WARNING", logger="gpu_autoscaler.config"):
        parse_config({"source": {"prometheus": {"util_query": 'avg(DCGM_FI_DEV_GPU_UTIL{$exporter})'}}})
    lines = [r.getMessage() for r in caplog.records if r.name == "gpu_autoscaler.config"]
    assert len(lines) == 1 and lines[0].startswith("source.prometheus.util_query is set but not read")
    caplog.clear()
    with caplog.at_level("WARNING", logger="gpu_autoscaler.config"):
        parse_config({"source": {"prometheus": {"recording_rules": True}}})
        parse_config({})
    assert not [r for r in caplog.records if r.name == "gpu_autoscaler.config"]


@pytest.mark.security
def test_a_tenant_name_with_the_series_separator_is_refused():
    """A forecast series is "<tenant>@<GPU types>" (daemon/policy/fleet.py), split at the last "@". Beside tenant
    "a", a tenant "a@b" on a one-model cluster had its forecast summed into a's by the policy (fleet.tenant_values:
    a's hold sized on both, "a@b" left without one); the skill gate and the start estimates read it as a's too. Now
    the name is refused in one line."""
    import numpy as np
    import pandas as pd

    from daemon.policy import fleet
    from forecaster.types import Forecast

    fc = Forecast(("a", "a@b"), (0.5,), np.array([[[4.0]], [[10.0]]]), pd.Timestamp("2026-01-01", tz="UTC"), 60, "m")
    assert fleet.tenant_values(fc, ("a", "a@b"))[:, 0, 0].tolist()[0] == 14.0   # what the policy does with it
    with pytest.raises(ConfigError) as e:
        parse_config({"tenants": [{"name": "a"}, {"name": "a@b"}]})
    assert "tenants.1.name" in str(e.value) and "holds '@'" in str(e.value) and "\n" not in str(e.value)
