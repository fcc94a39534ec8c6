"""A bench's JSON says which code it measured (bench/provenance.py): "+changes" when code differs from the commit,
not when only another bench's JSON or the docs rendered from it wait to be committed."""

import subprocess

from tests.conftest import REPO
from tests.support.bench_script import load_bench


def _repo(tmp_path):
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(tmp_path / "r")], check=True)
    return tmp_path / "r"


def test_only_code_changes_mark_a_commit_changed(tmp_path, monkeypatch):
    prov = load_bench(monkeypatch, "provenance")
    r = _repo(tmp_path)
    sha = subprocess.run(["git", "-C", str(r), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert prov.commit(r) == sha
    (r / "docs" / "eta.md").write_text("rendered again\n")
    (r / "README.md").write_text("its results table rendered again\n")
    next(iter((r / "bench" / "out").glob("*.json"))).write_text("{}\n")
    assert prov.commit(r) == sha                      # another bench's output and the docs: not measured code
    (r / "daemon" / "text.py").write_text((r / "daemon" / "text.py").read_text() + "# changed\n")
    assert prov.commit(r) == sha + "+changes"
