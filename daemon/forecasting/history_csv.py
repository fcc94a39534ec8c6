"""A history CSV as people write it by hand, read into columns named as its writer meant them (read_csv_columns;
read_history_file in retrain.py turns them into demand). Split from retrain.py, which trains and scores: this reads
a file's text. Its mistakes are refused with one line naming the file and the line or column, never a column shifted
or a name that no tenant matches."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pandas as pd

from daemon.forecasting.errors import DataError


def read_csv_columns(path: Path) -> pd.DataFrame:
    """The CSV's columns under its header's stripped names (`time, team-a`, a space after each comma as people
    type it, names `team-a`); a name given twice, or a column with no name that holds values, is refused."""
    return _named_columns(_read_csv(path), _header_once(path), path)


def _read_csv(path: Path) -> pd.DataFrame:
    """The CSV's columns under its header, never shifted. Data lines with a field more than the header (a comma
    ending every line but the header's) made pandas take the first column, the times, as the index: `time` held
    the first tenant's values, read as seconds of 1970, and each tenant its neighbour's. index_col=False keeps the
    columns where the header puts them; the fields past the header's last name are dropped when empty and refused
    (naming the first such line) when they hold a value, as no column says whose it is."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        df = pd.read_csv(path, skipinitialspace=True, index_col=False)
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        _refuse_values_past_the_header(path)
    return df


def _refuse_values_past_the_header(path: Path) -> None:
    """Raise naming the first line with a value past the header's last column (read again, only on this path)."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        rows = ((n, row) for n, row in enumerate(csv.reader(f, skipinitialspace=True), 1) if row)
        names = len(next(rows, (0, []))[1])
        for n, row in rows:
            if any(field.strip() for field in row[names:]):
                raise DataError(f"{path}: line {n} has {len(row)} fields, the header names {names} columns: a "
                                "value past the header's last column belongs to no column (name it in the header, "
                                "or remove it)")


def _header_once(path: Path) -> list[str]:
    """The CSV header's names, stripped (`team-a ` is the config's `team-a`, not a tenant of its own). Refused: a
    name given twice: pandas reads the second `team-b` as `team-b.1`, a tenant of its own that the replay (or the
    training) would add beside the first."""
    # read as pandas reads it: a spreadsheet's byte-order mark is no part of the first name, a space after a comma
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:  # blank lines: skipped, as pandas
        header = [h.strip() for h in next((row for row in csv.reader(f, skipinitialspace=True) if row), [])]
    seen: set[str] = set()
    for name in header:
        if name in seen and name:
            raise DataError(f"{path}: the header names column {name[:64]!r} twice: one column per tenant (sum them, "
                            "or rename one)")
        seen.add(name)
    return header


def _named_columns(df: pd.DataFrame, header: list[str], path: Path) -> pd.DataFrame:
    """The frame under the header's stripped names. A column with no name is dropped when it holds no value (a
    comma at the end of every line) and refused when it does: pandas names it `Unnamed: 2`, a tenant of its own,
    and an index written by `to_csv` would be one whose demand is the row number."""
    if len(header) != df.shape[1]:  # the header pandas read is not the one read here: its names are not known
        raise DataError(f"{path}: the header names {len(header)} columns where {df.shape[1]} were read: write the "
                        "header on the first line, one name per column")
    for i, name in enumerate(header):
        if not name and df.iloc[:, i].notna().any():
            raise DataError(f"{path}: column {i + 1} of the header has no name but holds values: name its tenant, "
                            "or drop the column (an index written by pandas' to_csv: write with index=False)")
    df.columns = header
    return df.loc[:, [bool(h) for h in header]]
