"""A daemon that cannot serve its HTTP port says so and exits; it never claims to serve /alerts."""

import socket
import subprocess
import sys

from tests.conftest import REPO


def test_a_port_in_use_stops_the_start_with_the_reason(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "daemon.cli", "run", "--sim", "--cycles", "3", "--port",
                               str(port)], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"cannot serve HTTP on 127.0.0.1:{port}" in proc.stderr
    assert "serving /metrics" not in proc.stderr
    assert "load=" not in proc.stdout  # no cycle ran
