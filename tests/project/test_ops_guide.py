"""docs/operations.md's install steps, run as written in a scratch root, leave a config the unit's check-config passes.

The blocks marked `<!-- extract: ops-install ... -->` are run line for line with bash, with only their absolute paths
(/etc, /var, /opt) moved under a scratch root. What needs root or a host is stood in for on PATH, and nothing else:
`useradd`, `chown` and `systemctl` record their arguments; `install` drops its `-o`/`-g` (owners) and runs the
real one; `python3 -m venv DIR` makes DIR/bin/pip (records) and DIR/bin/gpu-autoscaler (this checkout's CLI). Then
the installed unit's own ExecStartPre (`check-config`) runs, in its WorkingDirectory with its Environment.
"""

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MARK = re.compile(r"^<!-- extract: ops-install\b.*?-->\n```(?:sh|bash)\n(.*?)^```", re.S | re.M)
ABSOLUTE = re.compile(r"(?<![\w./-])/(etc|var|opt)/")


def install_steps() -> str:
    blocks = MARK.findall((REPO / "docs" / "operations.md").read_text())
    assert blocks, "docs/operations.md has no block marked <!-- extract: ops-install -->"
    return "\n".join(blocks)


def readme_config() -> str:
    for block in re.findall(r"^```toml\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M):
        if block.startswith("# /etc/gpu-autoscaler/config.toml"):
            return block
    raise AssertionError("README.md has no config block starting '# /etc/gpu-autoscaler/config.toml'")


def under(root: Path, text: str) -> str:
    return ABSOLUTE.sub(lambda m: f"{root}/{m.group(1)}/", text)


def shims(root: Path) -> Path:
    bin_ = root / "shim"
    bin_.mkdir()
    real_install, real_python = shutil.which("install"), shutil.which("python3")
    cli = Path(sys.executable).parent / "gpu-autoscaler"
    scripts = {
        "useradd": f'echo "useradd $*" >> {root}/host.log',
        "chown": f'echo "chown $*" >> {root}/host.log',
        "systemctl": f'echo "systemctl $*" >> {root}/host.log',
        # owners need root: everything else (modes, -d, -D, the copy) is the real install's
        "install": ('args=(); while [ $# -gt 0 ]; do case "$1" in -o|-g) shift 2;; --owner=*|--group=*) shift;; '
                    f'*) args+=("$1"); shift;; esac; done; exec {real_install} "${{args[@]}}"'),
        "python3": (f'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; '
                    f'printf \'#!/bin/sh\\necho "pip $*" >> {root}/host.log\\n\' > "$3/bin/pip"; '
                    f'printf \'#!/bin/sh\\nPYTHONPATH={REPO} exec {cli} "$@"\\n\' > "$3/bin/gpu-autoscaler"; '
                    f'chmod +x "$3/bin/pip" "$3/bin/gpu-autoscaler"; else exec {real_python} "$@"; fi'),
    }
    for name, body in scripts.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    return bin_


def unit_settings(unit: str) -> tuple[list[str], Path, dict[str, str]]:
    """The unit's ExecStartPre, WorkingDirectory and Environment, as systemd would run them."""
    pre = re.search(r"^ExecStartPre=(.*)$", unit, re.M).group(1)
    cwd = Path(re.search(r"^WorkingDirectory=(.*)$", unit, re.M).group(1))
    env = dict(v.split("=", 1) for v in re.findall(r"^Environment=(.*)$", unit, re.M))
    return shlex.split(pre), cwd, env


@pytest.mark.parametrize("which", ["README's minimal config", "deploy/config.example.toml"])
def test_the_documented_install_passes_the_units_check_config(tmp_path, which):
    root = tmp_path / "root"
    work = tmp_path / "checkout"  # where the guide's commands run: the checkout's models/ and systemd/
    for d in ("etc/systemd/system", "var/lib", "opt"):  # what a systemd host has before the guide starts
        (root / d).mkdir(parents=True)
    work.mkdir()
    shutil.copytree(REPO / "models", work / "models")
    (work / "systemd").symlink_to(REPO / "systemd")
    config = readme_config() if which.startswith("README") else (REPO / "deploy" / "config.example.toml").read_text()
    (work / "config.toml").write_text(under(root, config))
    env = {**os.environ, "PATH": f"{shims(root)}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", under(root, install_steps())], cwd=work, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the documented steps failed:\n{r.stdout}\n{r.stderr}"
    host = (root / "host.log").read_text()
    assert "systemctl enable --now gpu-autoscaler.service gpu-autoscaler-retrain.timer" in host
    # the unit as installed: its ExecStartPre, in its working directory, with its environment
    unit = under(root, (root / "etc/systemd/system/gpu-autoscaler.service").read_text())
    cmd, cwd, unit_env = unit_settings(unit)
    assert cmd[-1] == "check-config"
    r = subprocess.run(cmd, cwd=cwd, env={**env, **unit_env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the unit's check-config fails on the documented install:\n{r.stdout}\n{r.stderr}"
    # every secret the config names was written, readable by the owner and the group only
    named = re.findall(r'^\s*[a-z_]*_file\s*=\s*"([^"]+)"', under(root, config), re.M)
    assert named and all(stat.S_IMODE(Path(f).stat().st_mode) == 0o640 for f in named), named
