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
