"""A daemon told to stop does not wait for the window proposals' replay (daemon/web/window_proposals.py).

Found on make run: Ctrl-C (SIGTERM) while the proposals were being computed logged "stopping after the cycle in
flight" and the process stayed up until the replay behind the evidence ended, a minute later on a busy box: the
computation ran in a ThreadPoolExecutor, whose worker the interpreter joins at exit."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import threading
    from daemon.config import Config
    from daemon.web.window_proposals import WindowProposals

    started = threading.Event()

    def read(cfg):                      # the history store's read that never ends: a replay still under way
        started.set()
        threading.Event().wait()

    props = WindowProposals(Config, list, read=read)
    assert props.get("UTC") == {"status": "computing"}
    assert started.wait(30), "the computation did not start"
    print("leaving", flush=True)        # main returns with the computation under way
""")


def test_the_process_exits_with_a_proposals_computation_under_way():
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the process waited for the proposals' computation at exit") from exc
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaving" in done.stdout
