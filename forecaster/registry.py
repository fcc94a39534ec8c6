"""Versioned model artifacts: weights + metadata + checksum, and a manifest naming the current one.

A model is only ever loaded after its checksum and shapes check out; anything
else is a ModelError, which the daemon answers by falling back to a baseline.
Files are written to a temporary name and renamed, so a crash mid-write never
leaves a half-written manifest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forecaster.lstm import LSTMForecaster, QuantileLSTM

# torch (and forecaster.lstm, which needs it) is imported where a model is saved or loaded, not with this module:
# the daemon reads the manifest at start-up on every forecaster kind (forecasting/choose.py), and a daemon that runs
# a baseline never needs torch, whose import alone is about 450 MiB of RSS (bench/cycle_bench.py)
FORMAT = 1
# the most steps a model's spec may read back (context, season) or ahead (horizon): 10 weeks of 1-minute steps. No
# weight bounds context or season, and each forecast holds a window of them per series
MAX_SPEC_STEPS = 100_800
MANIFEST = "manifest.json"


class ModelError(Exception):
    """A model that cannot be used: missing, corrupt, or not matching this code."""


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(model_dir: Path) -> dict[str, Any]:
    p = Path(model_dir) / MANIFEST
    if not p.exists():
        return {"format": FORMAT, "current": None, "versions": []}
    try:
        m = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{p}: unreadable manifest: {exc}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("versions"), list):
        raise ModelError(f"{p}: not a format-{FORMAT} manifest")
    return m


def _write_manifest(model_dir: Path, m: dict[str, Any]) -> None:
    _atomic_write(Path(model_dir) / MANIFEST, (json.dumps(m, indent=2, sort_keys=True) + "\n").encode())


def code_version() -> str:
    try:
        from importlib.metadata import version

        return version("gpu-autoscaler")
    except Exception:
        return "unknown"


def save_version(model_dir: Path, model: QuantileLSTM, meta: dict[str, Any], version: str | None = None) -> str:
    """Write weights and metadata as a new version (not yet current)."""
    model_dir = Path(model_dir)
    now = dt.datetime.now(dt.timezone.utc)
    if version is None:
        # Two retrains within one second (tests, a retry after a crash) must not collide: add a suffix.
        base = now.strftime("v%Y%m%dT%H%M%SZ")
        version, n = base, 1
        while (model_dir / version).exists():
            version, n = f"{base}-{n}", n + 1
    vdir = model_dir / version
    if vdir.exists():
        raise ModelError(f"{vdir} already exists")
    import torch

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    weights = buf.getvalue()
    full = {"format": FORMAT, "version": version, "created": now.isoformat(), "spec": model.spec.to_dict(),
            "sha256": hashlib.sha256(weights).hexdigest(), "code_version": code_version(), **meta}
    _atomic_write(vdir / "model.pt", weights)
    _atomic_write(vdir / "meta.json", (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())
    m = read_manifest(model_dir)
    m["versions"].append({"version": version, "created": full["created"], "promoted": False,
                          "metrics": meta.get("metrics", {})})
    _write_manifest(model_dir, m)
    return version


def promote(model_dir: Path, version: str, reason: str) -> None:
    model_dir = Path(model_dir)
    load_version(model_dir, version)  # never promote something that does not load
    m = read_manifest(model_dir)
    for v in m["versions"]:
        if v["version"] == version:
            v["promoted"] = True
            v["reason"] = reason
    m["previous"] = m.get("current")
    m["current"] = version
    _write_manifest(model_dir, m)


def record_rejection(model_dir: Path, version: str, reason: str) -> None:
    m = read_manifest(model_dir)
    for v in m["versions"]:
        if v["version"] == version:
            v["reason"] = reason
    _write_manifest(model_dir, m)


def load_version(model_dir: Path, version: str) -> LSTMForecaster:
    import torch

    from forecaster.lstm import LSTMForecaster, LSTMSpec, QuantileLSTM

    vdir = Path(model_dir) / version
    try:
        meta = json.loads((vdir / "meta.json").read_text())
        weights = (vdir / "model.pt").read_bytes()
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"model {version}: cannot read artifact: {exc}") from None
    if meta.get("format") != FORMAT:
        raise ModelError(f"model {version}: format {meta.get('format')!r}, this code reads {FORMAT}")
    digest = hashlib.sha256(weights).hexdigest()
    if digest != meta.get("sha256"):
        raise ModelError(f"model {version}: checksum mismatch (file {digest[:12]}, "
                         f"metadata {str(meta.get('sha256'))[:12]}): the weights file is corrupt or was replaced")
    try:
        spec = LSTMSpec.from_dict(meta["spec"])
        state = torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
        with torch.device("meta"):   # the network the metadata describes, shaped but not allocated
            shaped = QuantileLSTM(spec)
    except Exception as exc:
        raise ModelError(f"model {version}: does not match this code's network: {exc}") from None
    _check_shapes(version, spec, shaped, state)
    try:
        model = QuantileLSTM(spec)
        model.load_state_dict(state, strict=True)
    except Exception as exc:
        raise ModelError(f"model {version}: does not match this code's network: {exc}") from None
    return LSTMForecaster(model, version)


def _check_shapes(version: str, spec: Any, shaped: Any, state: Any) -> None:
    """ModelError unless the weights are exactly the tensors of the network meta.json describes, checked before that
    network is built: the metadata is not under the checksum, and its spec sizes what is allocated (hidden 20,000
    is a 10 GB network, made and initialised before load_state_dict found that the weights are another's); and
    unless the steps it reads (context, season), which no weight bounds, are within MAX_SPEC_STEPS."""
    for key in ("context", "season", "horizon"):
        v = getattr(spec, key)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_SPEC_STEPS:
            raise ModelError(f"model {version}: meta.json spec.{key} = {v!r} is not a number of steps from 1 to "
                             f"{MAX_SPEC_STEPS:,}")
    want = {k: tuple(t.shape) for k, t in shaped.state_dict().items()}
    got = ({k: tuple(t.shape) for k, t in state.items() if hasattr(t, "shape")}
           if isinstance(state, dict) else {})
    if want != got:
        diff = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
        k = diff[0]
        raise ModelError(f"model {version}: does not match this code's network: meta.json's spec (hidden "
                         f"{spec.hidden}, horizon {spec.horizon}) makes {k} {want.get(k, 'absent')}, model.pt has "
                         f"{got.get(k, 'none')}")


def load_current(model_dir: Path) -> LSTMForecaster:
    m = read_manifest(Path(model_dir))
    cur = m.get("current")
    if not cur:
        raise ModelError(f"{model_dir}: no current model")
    return load_version(Path(model_dir), cur)


def read_in_use(model_dir: Path) -> dict[str, Any] | None:
    """The manifest's `in_use` entry (the model retrain chose for a cluster, LSTM or baseline), or None."""
    entry = read_manifest(Path(model_dir)).get("in_use")
    if entry is not None and (not isinstance(entry, dict) or "name" not in entry or "scored_on" not in entry):
        raise ModelError(f"{Path(model_dir) / MANIFEST}: `in_use` must be an object with name and scored_on")
    return entry


def set_in_use(model_dir: Path, entry: dict[str, Any]) -> None:
    """Record the model in use (and why). An LSTM must load before it is named; it also becomes `current`."""
    model_dir = Path(model_dir)
    if entry.get("kind") == "lstm":
        load_version(model_dir, entry["version"])
    m = read_manifest(model_dir)
    if entry.get("kind") == "lstm" and m.get("current") != entry["version"]:
        m["previous"], m["current"] = m.get("current"), entry["version"]
        for v in m["versions"]:
            if v["version"] == entry["version"]:
                v["promoted"] = True
                v["reason"] = entry.get("why", "")
    m["in_use"] = entry
    _write_manifest(model_dir, m)
