"""Credentials out of what the daemon shows and logs.

A source URL may carry a user and password (`http://user:pass@prometheus:9090`); /healthz, the console,
error messages and log lines show it as `http://***@prometheus:9090`.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ : the userinfo is anything up to the first "@" that comes before any "/", "?", "#" or space
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def redact_url(url: str) -> str:
    """`url` with its user info (user, password) replaced by `***`; otherwise unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return redact_text(url)
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def redact_text(text: str) -> str:
    """Every `scheme://user:pass@` in `text` with the user info replaced by `***`."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def redact_json(obj: object) -> object:
    """`obj` (JSON-like) with every string passed through redact_text."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_json(v) for v in obj]
    return obj


class RedactingFilter(logging.Filter):
    """A handler filter: the formatted message of every record has its URL user info redacted (a last line of
    defence for messages that carry an exception's text, which may quote a URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        clean = redact_text(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        return True
