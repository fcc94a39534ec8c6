"""A newcomer's history file that cannot be read says what to fix in one line (read_history_file: retrain --data,
backtest --data and simulate --data read through it), not pandas' own words."""

import pandas as pd
import pytest

from daemon.forecasting.errors import DataError
from daemon.forecasting.retrain import read_history_file


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty: a history starts with a header line (`time,<tenant>,...`"),   # was 'No columns to parse'
    ("\n\n", "the file is empty"),
    ("time,team-a\n", "a header but no data row"),                                   # was 'no tenant column or no row'
    ("time\n2026-01-01T00:00:00Z\n", "no tenant column: the header names only 'time'"),
])
def test_an_empty_file_a_header_alone_and_no_tenant_column_are_told_apart(tmp_path, text, message):
    f = tmp_path / "h.csv"
    f.write_text(text)
    with pytest.raises(DataError) as e:
        read_history_file(f, 60)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    # the package does not install pyarrow: pandas' answer was four sentences of its engines, in one line
    def no_engine(path, *a, **k):
        raise ImportError("Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'.")
    monkeypatch.setattr(pd, "read_parquet", no_engine)
    f = tmp_path / "h.parquet"
    f.write_bytes(b"PAR1")
    with pytest.raises(DataError) as e:
        read_history_file(f, 60)
    assert str(e.value) == (f"{f}: reading parquet needs pyarrow, which is not installed: `pip install pyarrow` in "
                            "the daemon's environment, or give the history as CSV")


@pytest.mark.parametrize("first, warned", [
    ("2026-01-01 00:00:00", True),          # a newcomer's local-time export: read as UTC, now said
    ("2026-01-01T00:00:00", True),
    ("2026-01-01T00:00:00Z", False),
    ("2026-01-01T00:00:00+01:00", False),
])
def test_a_time_with_no_zone_is_read_as_utc_and_said_once(tmp_path, caplog, first, warned):
    t = pd.date_range("2026-01-01", periods=10, freq="min")
    fmt = first[len("2026-01-01 00:00:00"):]
    sep = "T" if "T" in first else " "
    rows = [f"{x.strftime(f'%Y-%m-%d{sep}%H:%M:%S')}{fmt},{i % 3}" for i, x in enumerate(t)]
    f = tmp_path / "h.csv"
    f.write_text("time,team-a\n" + "\n".join(rows) + "\n")
    with caplog.at_level("WARNING", logger="gpu_autoscaler.retrain"):
        read_history_file(f, 60)
    said = [r.getMessage() for r in caplog.records if "names no zone" in r.getMessage()]
    assert len(said) == (1 if warned else 0)
    if warned:
        assert f"(first value '{first}'): read as UTC; if the file is in local time, give its offset" in said[0]
