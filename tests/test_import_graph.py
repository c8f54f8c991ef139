"""The import layers (docs/architecture.md, Layers): the real tree has no import cycle, lib imports no app, selectors
import no services or tasks and services no tasks; and the check `make lint` runs does catch each of those, planted
in a tree of its own, function-level imports included."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_imports.py"

_spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
check_imports = sys.modules.setdefault("check_imports", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check_imports)


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def package(*names: str) -> dict[str, str]:
    return {f"{name}/__init__.py": "" for name in names}


def test_the_tree_keeps_its_layers(capsys):
    assert check_imports.find_problems(ROOT) == []
    assert check_imports.main(["--root", str(ROOT)]) == 0
    assert capsys.readouterr().out.startswith("imports: no cycles")


def test_a_cycle_hidden_in_a_function_fails_naming_each_import(tmp_path, capsys):
    root = plant(
        tmp_path,
        {
            **package("controlplane", "controlplane/alerts", "controlplane/alerts/migrations"),
            "controlplane/alerts/evaluation.py": "import json\n\n\ndef enqueue():\n"
            "    from controlplane.alerts.tasks import send\n\n    send()\n",
            "controlplane/alerts/tasks.py": "from .evaluation import enqueue\n\n\ndef send():\n    enqueue()\n",
            # Migrations are not read: this one would close a second loop.
            "controlplane/alerts/migrations/0001_initial.py": "from controlplane.alerts import tasks\n",
        },
    )
    problems = check_imports.find_problems(root)
    assert problems == [
        "import cycle (2 modules: controlplane.alerts.evaluation, controlplane.alerts.tasks):\n"
        "    controlplane.alerts.evaluation -> controlplane.alerts.tasks    (controlplane/alerts/evaluation.py:5)\n"
        "    controlplane.alerts.tasks -> controlplane.alerts.evaluation    (controlplane/alerts/tasks.py:1)"
    ]
    assert check_imports.main(["--root", str(root)]) == 1
    printed = capsys.readouterr()
    assert "controlplane/alerts/evaluation.py:5" in printed.out and "1 import rule(s) broken" in printed.err


def test_a_longer_cycle_and_a_self_import_are_found(tmp_path):
    root = plant(
        tmp_path,
        {
            **package("engine_node"),
            "engine_node/a.py": "from engine_node import b\n",
            "engine_node/b.py": "import engine_node.c\n",
            "engine_node/c.py": "def f():\n    from . import a\n",
            "engine_node/d.py": "import engine_node.d\n",
            "engine_node/e.py": "from engine_node import a\n",  # leads into the loop, is not part of it
        },
    )
    problems = check_imports.find_problems(root)
    assert len(problems) == 2
    [loop] = [p for p in problems if "3 modules" in p]
    assert loop.splitlines()[1:] == [
        "    engine_node.a -> engine_node.b    (engine_node/a.py:1)",
        "    engine_node.b -> engine_node.c    (engine_node/b.py:1)",
        "    engine_node.c -> engine_node.a    (engine_node/c.py:2)",
    ]
    [itself] = [p for p in problems if "1 modules" in p]
    assert "engine_node.d -> engine_node.d    (engine_node/d.py:1)" in itself


def test_lib_importing_an_app_fails(tmp_path):
    root = plant(
        tmp_path,
        {
            **package("controlplane", "controlplane/lib", "controlplane/audit"),
            "controlplane/audit/services.py": "from controlplane.lib.errors import Conflict\n",
            "controlplane/lib/errors.py": "class Conflict(Exception):\n    pass\n",
            "controlplane/lib/runs.py": "from . import errors\nfrom controlplane.audit import services\n",
        },
    )
    assert check_imports.find_problems(root) == [
        "controlplane.lib imports an app: controlplane.lib.runs -> controlplane.audit.services    "
        "(controlplane/lib/runs.py:2)"
    ]


def test_selectors_importing_services_and_services_importing_tasks_fail(tmp_path):
    root = plant(
        tmp_path,
        {
            **package("controlplane", "controlplane/nodes", "controlplane/nodes/services"),
            "controlplane/nodes/selectors.py": "def f():\n    from controlplane.nodes.services.cleanup import g\n",
            "controlplane/nodes/services/cleanup.py": "def g():\n    pass\n",
            "controlplane/nodes/services/pools.py": "from controlplane.nodes import selectors, tasks\n",
            "controlplane/nodes/tasks.py": "",
        },
    )
    assert check_imports.find_problems(root) == [
        "selectors import services: controlplane.nodes.selectors -> controlplane.nodes.services.cleanup    "
        "(controlplane/nodes/selectors.py:2)",
        "services import tasks: controlplane.nodes.services.pools -> controlplane.nodes.tasks    "
        "(controlplane/nodes/services/pools.py:1)",
    ]
