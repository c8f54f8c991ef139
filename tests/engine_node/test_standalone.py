"""engine_node stands alone: no module imports Django or the control plane, and it runs without them."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "controlplane", "rest_framework", "channels")


def test_no_module_imports_django_or_the_control_plane():
    offenders = []
    for path in (ROOT / "engine_node").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_importing_every_module_loads_no_django():
    code = (
        "import importlib, pkgutil, sys, engine_node\n"
        "for m in pkgutil.walk_packages(engine_node.__path__, 'engine_node.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in {'django', 'controlplane'})\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_documents_every_setting():
    result = subprocess.run(
        [sys.executable, "-m", "engine_node", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for flag in (
        "--control-plane-url", "--token", "--backend", "--model", "--engine-arg", "--port", "--state-dir",
        "--model-dir", "--allow-model", "--allow-trust-remote-code", "--engine-env", "--insecure-control-plane",
    ):  # fmt: skip
        assert flag in result.stdout
    assert "ENGINE_NODE_TOKEN" in result.stdout
