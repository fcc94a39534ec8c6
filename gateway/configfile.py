"""What the gateway's config and the daemon's config share: strict frozen models, a TOML file read with one clear
error, validation errors as one line of dotted keys, and secrets kept in files. pydantic and the standard
library only."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not be ignored), and a loaded config cannot be changed in place."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def format_validation_error(exc: ValidationError, origin: str) -> str:
    """One line: `origin: dotted.key: what is wrong; ...`."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{key}: {'unknown key' if err['type'] == 'extra_forbidden' else err['msg']}")
    return f"{origin}: " + "; ".join(parts)


def read_toml(path: Path, error: type[Exception]) -> dict:
    """The file's table; `error` naming the file when it cannot be read or is not TOML."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def read_secret(path: Path, where: str, error: type[Exception]) -> str:
    """A token or key kept in a file (stripped); `error` naming `where` if it cannot be read or is too short."""
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise error(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(value) < 16:
        raise error(f"{where}: {path} holds fewer than 16 characters")
    return value
