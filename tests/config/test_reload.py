"""Config reload (SIGHUP): what may change live, what waits for a restart, and that the merged whole is
validated as start-up validates it."""

import pytest
from pydantic import model_validator

from daemon.config import Config, ConfigError
from daemon.config.reload import merge


def test_reload_keeps_restart_only_sections():
    running = Config(cycle={"interval_s": 2.0}, server={"port": 1234}, source={"kind": "simulator"})
    new = Config(cycle={"interval_s": 30.0, "max_missing_share": 0.5}, server={"port": 9105},
                 policy={"reserve_share": 0.3}, source={"kind": "prometheus"})
    cfg, kept = merge(running, new)
    assert cfg.policy.reserve_share == 0.3 and cfg.cycle.max_missing_share == 0.5
    assert cfg.server.port == 1234 and cfg.source.kind == "simulator" and cfg.cycle.interval_s == 2.0
    assert set(kept) == {"server", "source", "cycle.interval_s"}


def test_the_series_shape_and_the_history_wait_for_a_restart():
    # the source, its history and the model were built for these at start-up; the policy must judge staleness
    # by the same limit the source does
    running = Config()
    new = Config(cycle={"resolution_s": 30, "history_steps": 600, "horizon_steps": 30, "stale_after_s": 60},
                 history={"incremental": False}, policy={"reserve_share": 0.3})
    cfg, kept = merge(running, new)
    assert cfg.cycle == running.cycle and cfg.history == running.history
    assert cfg.policy.reserve_share == 0.3
    assert set(kept) == {"history", "cycle.resolution_s", "cycle.history_steps", "cycle.horizon_steps",
                         "cycle.stale_after_s"}


def test_a_reload_never_runs_ets_on_a_history_start_up_would_refuse():
    # the probe: running Holt-Winters (restart-only) on 8 days; the new file asks for another model and 120
    # steps, which is valid on its own. Merged the old way, the daemon ran 'ets' on 120 steps.
    running = Config(cycle={"history_steps": 11520}, forecaster={"kind": "ets"})
    new = Config(cycle={"history_steps": 120}, forecaster={"kind": "seasonal_naive"})
    cfg, kept = merge(running, new)
    assert cfg.forecaster.kind == "ets" and cfg.cycle.history_steps == 11520
    assert {"forecaster", "cycle.history_steps"} <= set(kept)
    Config.model_validate(cfg.model_dump())  # what start-up would say of it


class _Checked(Config):
    """A config with one more check across a live and a restart-only section, as future checks may be."""

    @model_validator(mode="after")
    def _share_fits_the_cluster(self) -> "_Checked":
        if self.policy.reserve_share * self.cluster.gpus < 1:
            raise ValueError("policy.reserve_share leaves the high tier less than one GPU")
        return self


def test_the_merged_config_is_checked_across_sections_as_at_start_up():
    running = _Checked(cluster={"gpus": 4}, policy={"reserve_share": 0.5})
    new = _Checked(cluster={"gpus": 1000}, policy={"reserve_share": 0.01})  # valid alone: 10 GPUs
    with pytest.raises(ConfigError, match="less than one GPU") as err:
        merge(running, new, "config.toml")  # merged: 0.01 of the running 4 GPUs
    assert str(err.value).startswith("config.toml")


def test_a_window_for_a_tenant_added_in_the_same_edit_says_the_tenants_wait_for_a_restart():
    """A reload of a file that adds a tenant and its window said only "windows.w.tenant: 'newt' is not one of
    [[tenants]] (a)", while the file lists newt (and check-config passed on it): the merged whole is checked against
    the running tenants, which change only at a restart."""
    from daemon.config import parse_config

    base = {"cluster": {"gpus": 64}, "tenants": [{"name": "a"}]}
    new = parse_config({**base, "tenants": [{"name": "a"}, {"name": "newt"}],
                        "windows": [{"name": "w", "tenant": "newt", "gpus": 8, "every": "daily", "at": "10:00",
                                     "duration_minutes": 30}]})
    with pytest.raises(ConfigError) as err:
        merge(parse_config(base), new, "config.toml")
    msg = str(err.value)
    assert "'newt' is not one of [[tenants]] (a)" in msg
    assert "(checked against the running tenants: the file's differ, and apply only at a restart)" in msg
    assert "\n" not in msg


def test_reread_returns_the_merged_config_and_changes_nothing(tmp_path):
    """The module is pure: it reads, validates and merges, and returns the result; the running config object
    is left as it was and nothing is swapped in (Daemon.use_config does that, daemon/service/loop.py)."""
    from daemon.config.reload import reread

    running = Config(server={"port": 1234}, policy={"reserve_share": 0.1})
    before = running.model_dump()
    path = tmp_path / "config.toml"
    path.write_text("[server]\nport = 9999\n\n[policy]\nreserve_share = 0.3\n")
    cfg, kept = reread(path, running)
    assert cfg.policy.reserve_share == 0.3 and cfg.server.port == 1234 and kept == ["server"]
    assert running.model_dump() == before and cfg is not running
    path.write_text("[policy]\nreserve_shar = 0.3\n")  # a typo: refused, with the file named
    with pytest.raises(ConfigError, match="reserve_shar") as err:
        reread(path, running)
    assert str(path) in str(err.value)
