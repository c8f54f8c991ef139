"""In `make test` a skipped test fails the run (CONTROLPLANE_TEST_NO_SKIP, tests/conftest.py): a real part that is
missing (vLLM, promtool, Postgres, Chromium) is a failure, never a quiet pass. Shown on a planted module, with and
without the switch, on parallel workers as `make test` runs them."""

import os
import subprocess
import sys

import pytest

from tests.live_server import ROOT

pytestmark = pytest.mark.subprocess

PLANTED = """
import pytest

def test_needs_promtool():
    pytest.skip("promtool not installed")

def test_passes():
    pass
"""


def run_planted(tmp_path, workers: str, **env) -> subprocess.CompletedProcess:
    planted = ROOT / "tests" / f"test_planted_skip_{os.getpid()}.py"
    # A run of its own, not a worker of this one (xdist's variables would make its controller think it is one).
    parent = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CONTROLPLANE_TEST_"))}
    planted.write_text(PLANTED)
    try:
        return subprocess.run(
            # The fuzzer's plugin (schemathesis, hypothesis: ~1 s a process) has nothing to do in the planted run.
            [sys.executable, "-m", "pytest", "-p", "tests.workers", "-p", "no:cacheprovider", "-p", "no:schemathesis",
             "-q", "-n", workers, str(planted)],
            cwd=ROOT, env={**parent, **env}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        planted.unlink()


def test_a_skip_fails_the_run_only_where_every_real_part_must_run(tmp_path):
    strict = run_planted(tmp_path, "2", CONTROLPLANE_TEST_NO_SKIP="1")
    assert strict.returncode == 1, strict.stdout[-2000:]
    assert "1 test(s) skipped where every real part must run:" in strict.stdout
    assert "test_needs_promtool: Skipped: promtool not installed" in strict.stdout
    lenient = run_planted(tmp_path, "0", CONTROLPLANE_TEST_NO_SKIP="")
    assert lenient.returncode == 0, lenient.stdout[-2000:]
