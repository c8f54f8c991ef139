"""scripts/gpu_check.py on a host without CUDA: one JSON line saying so, and the distinct exit status."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def run(python: str) -> tuple[int, dict]:
    done = subprocess.run(
        [python, str(ROOT / "scripts" / "gpu_check.py")], capture_output=True, text=True, timeout=120, check=False
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, json.loads(lines[0])


def test_without_cuda_it_says_so_and_exits_2():
    # The vLLM interpreter has PyTorch (the CPU build here); the check must name the missing device, not fail.
    python = str(VLLM_PYTHON) if VLLM_PYTHON.exists() else sys.executable
    code, result = run(python)
    assert code == 2
    assert result["cuda"] is False and result["ok"] is None
    assert "CUDA" in result["reason"] or "PyTorch is not installed" in result["reason"]
