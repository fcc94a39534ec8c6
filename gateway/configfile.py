"""What the gateway's config and the daemon's config share: strict frozen models, a TOML file read with one clear
error, validation errors as one line of dotted keys, and secrets kept in files. pydantic and the standard
library only."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

# A duration longer than this is a typo; and the threads' waits overflow a little above 9.2e9 s, so an unbounded one
# (`interval_s = 1e300`) would kill the thread that waits on it while the process stays up.
MAX_DURATION_S = 10 * 365 * 86400.0
DURATION_UNITS = {"_s": 1.0, "_seconds": 1.0, "_minutes": 60.0, "_days": 86400.0}  # the field name's suffix


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not be ignored), and a loaded config cannot be changed in place.

    For every field of every section, here once: a boolean is `true` or `false`, never a string or a number
    (`dry_run = "no"` would be read as false, the opposite of what it says); a number is finite (`inf` passes
    `gt=0`); and a duration (a name ending `_s`, `_seconds`, `_minutes` or `_days`) is at most ten years."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_are_booleans(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and field.annotation in (bool, bool | None) and v is not None \
                and not isinstance(v, bool):
            raise PydanticCustomError("bool_type", "must be true or false (unquoted), not {given}",
                                      {"given": repr(v)})
        return v

    @field_validator("*")
    @classmethod
    def _durations_are_bounded(cls, v: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        unit = next((u for suffix, u in DURATION_UNITS.items() if name.endswith(suffix)), None)
        if unit is not None and isinstance(v, int | float) and not isinstance(v, bool) and v * unit > MAX_DURATION_S:
            raise PydanticCustomError("duration_too_long", "{v} is longer than ten years: a typo?", {"v": f"{v:g}"})
        return v


def error_text(err: Any, unknown: str = "unknown key") -> str:
    """What one pydantic error says is wrong, as the user reads it: a validator's own sentence without pydantic's
    "Value error, " in front of it (the key or field is named beside it)."""
    if err["type"] == "extra_forbidden":
        return unknown
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ") if err["type"] == "value_error" else msg


def format_validation_error(exc: ValidationError, origin: str) -> str:
    """One line: `origin: dotted.key: what is wrong; ...`. A check of the whole file (a model validator: no key)
    names its keys in its own text, so it is said without a prefix (it read `<root>: windows.x.gpus: ...`)."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        parts.append(f"{key}: {error_text(err)}" if key else error_text(err))
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
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise error(f"{path}: not a config: arrays or tables nested too deeply") from None


def read_secret(path: Path, where: str, error: type[Exception]) -> str:
    """A token or key kept in a file (stripped); `error` naming `where` if it cannot be read or is too short."""
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise error(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(value) < 16:
        raise error(f"{where}: {path} holds fewer than 16 characters")
    return value
