"""Parallel workers (pytest-xdist) without shared state: loaded with `-p tests.workers` (the Makefile does).

pytest-django already gives each worker a test database of its own (test_controlplane_gw0, _gw1, ...). This plugin
gives each a Redis database of its own before Django reads its settings: worker N uses the database numbered N below
the one REDIS_URL names (redis://127.0.0.1:6379/15 -> 15, 14, 13, ...), for the channel layer, the cache, Celery's
broker, the event counters and everything the worker's daphne processes and agents inherit through the environment.
"""

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

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
