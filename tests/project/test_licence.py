"""The licence pyproject declares is shipped, and the README says under what terms the model and traces come."""

import hashlib
import re
import tomllib

from daemon.forecasting.retrain import TRACES
from tests.conftest import REPO

# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text, byte for byte
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_declared_licence_is_shipped_as_the_standard_text():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256


def test_the_readme_gives_the_licences_of_the_model_and_of_every_trace_the_benches_read():
    text = (REPO / "README.md").read_text()
    m = re.search(r"^## Licence\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, "README.md has no '## Licence' section"
    sec = m.group(1).lower()
    assert "(license)" in sec and "apache license 2.0" in sec and "models/" in sec
    for t in TRACES:  # a trace added to the readers needs its licence named here
        assert t in sec, f"the README's licence section does not name the {t} trace"
