"""The one error a history, a file or a source that cannot be used raises: its message is the one line the CLI
prints (it names the file, the column or the row). Here, below retrain and the units, so both raise it."""

from __future__ import annotations


class DataError(Exception):
    pass
