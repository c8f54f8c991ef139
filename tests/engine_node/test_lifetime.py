"""A child started through engine_node.lifetime ends when the process that started it dies, even by SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine_node.fleet import wait_until
from tests.engine_node.test_agent_shutdown import alive
from tests.live_server import ROOT

pytestmark = pytest.mark.subprocess

PARENT = """
import subprocess, sys, time
from engine_node.lifetime import tied_to_parent
child = subprocess.Popen(tied_to_parent([sys.executable, "-c", "import time; time.sleep(120)"]))
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_child_gets_sigterm_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
        time.sleep(0.5)
        assert alive(child)  # the launcher exec'ed the command: same pid, still running
        parent.kill()
        parent.wait()
        wait_until(lambda: not alive(child), 5, "the child to end with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_shell_script_ties_its_children_with_the_module():
    sleeper = f'{sys.executable} -c "import time; time.sleep(120)"'
    script = f"{sys.executable} -m engine_node.lifetime $$ TERM {sleeper} & echo $!; wait"
    shell = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(shell.stdout.readline())
        cmdline = Path(f"/proc/{child}/cmdline")
        wait_until(lambda: b"time.sleep(120)" in cmdline.read_bytes(), 5, "the launcher to exec the command")
        os.kill(shell.pid, signal.SIGKILL)
        shell.wait()
        wait_until(lambda: not alive(child), 5, "the child to end with the script")
    finally:
        if shell.poll() is None:
            shell.kill()


def test_a_command_whose_parent_is_already_gone_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    dead = subprocess.Popen(["true"])
    dead.wait()
    result = subprocess.run(
        [sys.executable, "-m", "engine_node.lifetime", str(dead.pid), "TERM", "touch", str(marker)],
        cwd=ROOT, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert not marker.exists()
