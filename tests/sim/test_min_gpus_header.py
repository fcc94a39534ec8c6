"""`simulate --data --min-gpus` states the SLO it sized for: with inference services in the file, the high tier's
throttled requests are part of it (sizing.meets), and the header said only the unmet GPU shares while every
strategy's line below gave a throttled share that decided its verdict."""

import numpy as np
import pandas as pd
from click.testing import CliRunner

from daemon.cli import cli

CFG = ('[cluster]\ngpus = 64\n[forecaster]\nseason_steps = 100\n[policy]\nheadroom = 0.0\n'
       '[[tenants]]\nname = "hi"\ntier = "high"\njob_gpus = 8\n[[tenants]]\nname = "lo"\ntier = "low"\njob_gpus = 1\n')
SVC = ('[[tenants]]\nname = "svc"\ntier = "high"\n[tenants.inference]\ngpus_per_replica = 1\nreplica_rps = 5\n'
       'cold_start_s = 120\n')


def _header(tmp_path, services: bool) -> str:
    tmp_path.mkdir()
    t = np.arange(800)
    idx = pd.date_range("2026-01-01", periods=800, freq="min", tz="UTC", name="time")
    cols = {"hi": np.where((t >= 650) & (t < 750), 24.0, 8.0), "lo": np.full(800, 32.0)}
    if services:
        cols["svc[req/s]"] = 20 + 10 * np.sin(t / 50)
    f = tmp_path / "own.csv"
    pd.DataFrame(cols, index=idx).reset_index().to_csv(f, index=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG + (SVC if services else ""))
    r = CliRunner().invoke(cli, ["--config", str(cfg), "simulate", "--data", str(f), "--days", str(200 / 1440),
                                 "--min-gpus", "--quick-forecaster", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    return next(x for x in r.output.splitlines() if x.startswith("the smallest cluster meeting the SLO"))


def test_the_min_gpus_header_names_the_requests_slo_where_services_were_replayed(tmp_path):
    with_svc = _header(tmp_path / "svc", services=True)
    assert "(high tier <= 0.10% unmet and <= 0.10% of its requests throttled, normal <= 2.00%)" in with_svc, with_svc
    plain = _header(tmp_path / "plain", services=False)
    assert "(high tier <= 0.10% unmet, normal <= 2.00%)" in plain and "requests" not in plain, plain


def test_a_strategy_that_never_meets_the_slo_is_told_which_knobs_move_its_floor(tmp_path):
    """A service whose rate jumps every 20 minutes is served a cold start late at each jump by static and
    reactive, at any size: their lines say "never meets" and the cold-start lag, and nothing said what to change.
    One more line now names the service settings of [tenants.inference] that start replicas ahead."""
    t = np.arange(800)
    idx = pd.date_range("2026-01-01", periods=800, freq="min", tz="UTC", name="time")
    cols = {"hi": np.full(800, 8.0), "lo": np.full(800, 16.0),
            "svc[req/s]": np.where((t // 10) % 2 == 0, 10.0, 60.0)}
    f = tmp_path / "own.csv"
    pd.DataFrame(cols, index=idx).reset_index().to_csv(f, index=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG + SVC)
    r = CliRunner().invoke(cli, ["--config", str(cfg), "simulate", "--data", str(f), "--days", str(200 / 1440),
                                 "--min-gpus", "--quick-forecaster", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    never = [x.split()[0] for x in r.output.splitlines() if "never meets" in x]
    assert {"static", "reactive"} <= set(never), r.output
    hint = [x for x in r.output.splitlines() if "no size meets the SLO at these service settings" in x]
    assert len(hint) == 1 and "`headroom` or `scale_down_stabilization_s` in each service's [tenants.inference]" \
        in hint[0] and hint[0].startswith("static and reactive"), r.output
