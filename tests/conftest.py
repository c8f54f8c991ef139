"""Shared fixtures: one user per role, API clients signed in as each, and the seed document."""

import os
import subprocess
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from tests.static_files import scan_static_files_once

SEED_YAML_PATH = Path(__file__).resolve().parent.parent / "controlplane/params/fixtures/seed_inference_params.yaml"
PASSWORD = "correct-horse-battery"

scan_static_files_once()  # a test client's middleware reuses WhiteNoise's scan (tests/static_files.py)


@pytest.fixture(autouse=True)
def fast_password_hashing(request, settings):
    """PBKDF2 costs ~0.3 s a user; browser tests keep it because daphne checks their passwords."""
    if request.node.get_closest_marker("browser") is None:
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_shared_samples():
    """Every test starts without the nodes' latest samples an earlier test's processes shared through Redis (their
    entries would count in a same-named pool's figures for a few seconds)."""
    from django.conf import settings

    if settings.REDIS_URL:
        from controlplane.metrics.shared_latest import shared_key

        redis_client(settings.REDIS_URL).delete(shared_key())


_REDIS_CLIENTS: dict = {}


def redis_client(url: str):
    """One client per Redis URL for the test process's own housekeeping (a connection a test saved)."""
    if url not in _REDIS_CLIENTS:
        import redis

        _REDIS_CLIENTS[url] = redis.Redis.from_url(url)
    return _REDIS_CLIENTS[url]


@pytest.fixture(scope="session", autouse=True)
def audit_table_flushable():
    """Django empties the test database after each transactional test; tests/fast_flush.py does it by deleting every
    row under the locks a TRUNCATE takes, and lifts the audit table's trigger (which refuses that like anyone's:
    controlplane/audit/migrations/0002, 0004) inside the flush's own transaction, and only there."""
    from tests.fast_flush import install

    uninstall = install()
    try:
        yield
    finally:
        uninstall()


# The test time scale of the nodes' sample window (10 s in production): a fleet test whose figures must turn over
# after a change (a canary stage, an impact record's after-window, an alert on P99) waits this long instead.
SHORT_SAMPLE_WINDOW_S = 2


@pytest.fixture
def short_sample_window(settings, monkeypatch) -> int:
    """Samples cover SHORT_SAMPLE_WINDOW_S on both sides: the agents and daphne processes started after this fixture
    (ENGINE_NODE_SAMPLE_WINDOW_S, METRICS_SAMPLE_WINDOW_S in their environment) and this process's own readers
    (rollout analysis, impact conclusions, alert evaluation). Request it before the fixture that starts the fleet."""
    monkeypatch.setenv("ENGINE_NODE_SAMPLE_WINDOW_S", str(SHORT_SAMPLE_WINDOW_S))
    monkeypatch.setenv("METRICS_SAMPLE_WINDOW_S", str(SHORT_SAMPLE_WINDOW_S))
    settings.METRICS_SAMPLE_WINDOW_S = SHORT_SAMPLE_WINDOW_S
    return SHORT_SAMPLE_WINDOW_S


@pytest.fixture
def seed_yaml() -> str:
    return SEED_YAML_PATH.read_text(encoding="utf-8")


def make_user(role: str, username: str | None = None) -> User:
    return User.objects.create_user(username=username or role, password=PASSWORD, role=role)


@pytest.fixture
def users(db) -> dict[str, User]:
    return {role: make_user(role) for role in Role.values}


@pytest.fixture
def agent(users) -> User:
    return users[Role.AGENT]


@pytest.fixture
def sre(users) -> User:
    return users[Role.SRE]


@pytest.fixture
def oncall(users) -> User:
    return users[Role.ONCALL]


@pytest.fixture
def admin_user(users) -> User:
    return users[Role.ADMIN]


@pytest.fixture
def api_for(users):
    """api_for("sre") -> an APIClient authenticated as that role's user (or None for anonymous)."""

    def build(role: str | None) -> APIClient:
        client = APIClient()
        if role is not None:
            client.force_authenticate(users[role])
        return client

    return build


# Markers that start processes; a test carrying one of them is in the `fleet` tier (docs/testing.md).
PROCESS_MARKERS = ("agents", "sqlite", "subprocess")


def pytest_configure(config):
    """Workers share nothing: without tests.workers, two workers would clear each other's Redis state. The quick tier
    (CONTROLPLANE_TEST_TIER=quick, `make test-quick`) refuses to start any process, so a test that needs one and is
    not marked for it fails there instead of slowing the inner loop."""
    isolated = os.environ.get("CONTROLPLANE_TEST_WORKER_ISOLATED")
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("REDIS_URL") and not isolated:
        raise pytest.UsageError("parallel workers need `-p tests.workers` (a Redis database each): see docs/testing.md")
    if os.environ.get("CONTROLPLANE_TEST_TIER") == "quick":
        refuse_processes()
    config.pluginmanager.register(RunOrder(), "controlplane-run-order")


def refuse_processes() -> None:
    started = subprocess.Popen.__init__

    def refuse(self, args, *rest, **kwargs):
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        if not test:  # pytest's own machinery (xdist starting its workers), not a test or its fixtures
            return started(self, args, *rest, **kwargs)
        raise AssertionError(
            f"{test} starts a process ({args!r:.80}) in the quick tier: mark its module "
            "pytest.mark.subprocess (or agents, sqlite, browser, vllm) - docs/testing.md"
        )

    subprocess.Popen.__init__ = refuse


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Every test that starts a process carries `fleet` as well as the marker that says which (-m fleet runs that
    tier). Parallel workers take a module at a time (its group), except that every vLLM test is in one group: vLLM
    on the CPU takes every core it finds, and two at once on a 2-core machine time each other out. The order the
    groups run in is `order_the_run`'s."""
    for item in items:
        if any(item.get_closest_marker(name) for name in PROCESS_MARKERS):
            item.add_marker(pytest.mark.fleet)
        group = "vllm" if item.get_closest_marker("vllm") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


class RunOrder:
    """Registered in pytest_configure: its sort runs after pytest-django's own, which it replaces."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        order_the_run(items)


def order_the_run(items) -> None:
    """The order a worker runs its tests in (pytest-xdist hands the groups out in this order):

    1. tests in a rolled-back transaction, and tests without a database: first, as Django runs them, since a
       transactional test's flush empties the rows the migrations wrote;
    2. transactional tests (every vLLM test with them: a group stays together), the vLLM group first and the fleet
       tier next, so that workers start the longest files early and end together;
    3. browser tests last of all: Playwright's sync API runs an event loop on the worker's thread for as long as its
       Chromium (one a worker) lives, and async_to_sync refuses to run beside it."""

    def order(item) -> tuple:
        vllm = item.get_closest_marker("vllm")
        section = 2 if item.get_closest_marker("browser") else 1 if vllm or _transactional(item) else 0
        return section, vllm is None, shared_vllm_order(item, vllm), item.get_closest_marker("fleet") is None

    items.sort(key=order)


def _transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    if marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")):
        return True
    return bool({"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())))


def shared_vllm_order(item, vllm) -> int:
    """Among the vLLM tests that share one agent (tests/engine_node/vllm_node.py): the one that starts it itself
    first (`pytest.mark.vllm(shared_node="starts")`), then the others, and last the one that leaves its engine on
    other flags (`"changes"`); the vLLM tests without the agent before them all."""
    if vllm is None or "vllm_node" not in item.fixturenames:
        return 0
    return {"starts": 1, "changes": 3}.get(vllm.kwargs.get("shared_node"), 2)


def pytest_runtest_teardown(item, nextitem):
    """After the last test in a row that shares the agent on vLLM, the agent stops: its worker polls for work for a
    second after every memory reading, half a core that the next tests (another vLLM start among them) need."""
    if "vllm_node" in item.fixturenames and (nextitem is None or "vllm_node" not in nextitem.fixturenames):
        from tests.engine_node.vllm_node import release_shared_agent

        release_shared_agent()


# `make test` sets CONTROLPLANE_TEST_NO_SKIP: a skipped test there means a real part was missing (vLLM, promtool,
# Postgres, Chromium), and a suite that skipped it proved nothing about it.
SKIPPED: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("CONTROLPLANE_TEST_NO_SKIP"):
        SKIPPED.append(f"{report.nodeid}: {report.longrepr[-1] if isinstance(report.longrepr, tuple) else ''}")


def pytest_sessionfinish(session, exitstatus):
    if SKIPPED and exitstatus == 0 and not os.environ.get("PYTEST_XDIST_WORKER"):
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if SKIPPED and not os.environ.get("PYTEST_XDIST_WORKER"):
        terminalreporter.write_line(f"{len(SKIPPED)} test(s) skipped where every real part must run:", red=True)
        for line in SKIPPED:
            terminalreporter.write_line(f"  {line}", red=True)
