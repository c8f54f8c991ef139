"""Parallel workers (pytest-xdist) without shared state: loaded with `-p tests.workers` (the Makefile does).

pytest-django already gives each worker a test database of its own (test_controlplane_gw0, _gw1, ...). This plugin
gives each a Redis database of its own before Django reads its settings: worker N uses the database numbered N below
the one REDIS_URL names (redis://127.0.0.1:6379/15 -> 15, 14, 13, ...), for the channel layer, the cache, Celery's
broker, the event counters and everything the worker's daphne processes and agents inherit through the environment.

It also keeps `--dist loadgroup` true to its word: tests carrying `pytest.mark.xdist_group(name)` run on one worker,
one after another (tests/conftest.py puts each module in a group and every vLLM test in one). pytest-xdist 3.8 marks
a group by appending "@name" to the item's `_nodeid`, which pytest 9.2 no longer reads (a node's id is `_id`): every
test would be a unit of its own, modules split across workers, and a module-scoped fixture (a fleet, a world, a
vLLM) built once per worker. Here each worker writes the groups it collected to a file and the controller's
scheduler (GroupScheduling) reads them; a test without a group is scheduled with the rest of its module.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from xdist.scheduler import LoadScopeScheduling

FIRST_SHARED_DB = 1  # never hand a worker database 0, where a developer's own data most likely lives


def worker_redis_url(url: str, worker: str) -> str:
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    db = base - index
    if db < FIRST_SHARED_DB:
        raise pytest.UsageError(f"REDIS_URL names database {base}: too low for worker {worker} to get one of its own")
    return urlunsplit(parts._replace(path=f"/{db}"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], worker)
        os.environ["CONTROLPLANE_TEST_WORKER_ISOLATED"] = "1"


GROUPS_DIR = "controlplane_groups_dir"
GROUPS_KEY = pytest.StashKey[str]()  # the controller's directory of the workers' group files


class GroupScheduling(LoadScopeScheduling):
    """Whole groups (or, without one, whole modules) to one worker each, in the order the tests were collected in
    (tests/conftest.py, order_the_run: pytest-xdist's default reorder by size would undo it)."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False
        self.groups_dir = Path(config.stash[GROUPS_KEY])
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # called once every worker has sent its collection, so every file is written
            files = sorted(self.groups_dir.glob("*.json"))
            self._groups = json.loads(files[0].read_text()) if files else {}
        group = self._groups.get(nodeid)
        return f"@{group}" if group else super()._split_scope(nodeid)


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and config.pluginmanager.hasplugin("xdist"):
        config.stash[GROUPS_KEY] = tempfile.mkdtemp(prefix="controlplane-groups-")


def pytest_unconfigure(config):
    if GROUPS_KEY in config.stash:
        shutil.rmtree(config.stash[GROUPS_KEY], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        return GroupScheduling(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[GROUPS_DIR] = node.config.stash[GROUPS_KEY]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On a worker: every test's group (its xdist_group markers, as pytest-xdist names them) for the controller."""
    directory = getattr(config, "workerinput", {}).get(GROUPS_DIR)
    if not directory:
        return
    groups = {}
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names:
            groups[item.nodeid] = "_".join(names)
    path = Path(directory) / f"{config.workerinput['workerid']}.json"
    path.with_suffix(".tmp").write_text(json.dumps(groups))
    path.with_suffix(".tmp").replace(path)
