"""A real ASGI server (daphne) on the test database, and Debian's Chromium driven by Playwright."""

import contextlib
import io
import os
import threading
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from controlplane.accounts.models import User
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.live_server import Daphne

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Playwright's sync API runs an event loop in this thread; the ORM calls of the tests are still sequential.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def control_plane(django_db_setup, django_db_blocker, tmp_path_factory) -> Daphne:
    """daphne serving controlplane.asgi against the test database, for as long as the session runs, with Celery eager
    as in `make run` without Redis (training, replays and studies run in the server's own threads). It stores
    conversation logs in `conversation_log_dir`, where a test that stores one itself points CONVERSATION_LOG_DIR."""
    directory = tmp_path_factory.mktemp("daphne")
    logs = directory / "logs"
    server = Daphne(directory, extra_env={"CELERY_TASK_ALWAYS_EAGER": "1", "CONVERSATION_LOG_DIR": str(logs)})
    server.conversation_log_dir = logs
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server_url(control_plane) -> str:
    return control_plane.url


# Session scope, one Chromium per worker: Playwright's sync API keeps an event loop running in this thread from the
# first browser test to the end of the session, which would break a later test calling async_to_sync in this thread;
# none comes later, as tests/conftest.py runs the browser tests after every other test on a worker.
@pytest.fixture(scope="session")
def browser():
    playwright_sync = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium not found at {CHROMIUM}: run `make chromium` (Debian package chromium)")
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def repeatable_password_hashes(settings):
    """The demo users' passwords hashed once per worker, not once a test (tests/browser/passwords.py)."""
    settings.PASSWORD_HASHERS = ["tests.browser.passwords.RepeatablePBKDF2PasswordHasher"]


@pytest.fixture
def new_page(browser):
    """new_page() -> a page in a fresh browser context (its own cookies), closed after the test."""
    contexts = []

    def build():
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield build
    for context in contexts:
        context.close()


@pytest.fixture
def shot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        """A full-page screenshot once the page has loaded. Chromium refuses a capture while a page that has just
        navigated has not drawn its first frame yet ("Unable to capture screenshot"): then it waits for that frame
        and tries once more."""
        from playwright.sync_api import Error as PlaywrightError  # as the browser fixture: only where it runs

        path = SCREENSHOTS / f"{name}.png"
        page.wait_for_load_state("load")
        try:
            page.screenshot(path=str(path), full_page=True)
        except PlaywrightError as exc:
            if "Unable to capture screenshot" not in str(exc):
                raise
            page.evaluate("() => new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)))")
            page.screenshot(path=str(path), full_page=True)
        return path

    return take


@contextlib.contextmanager
def off_this_thread(manager):
    """Enters and exits a context manager on a thread of its own (Playwright runs an event loop on this one, where
    services that publish events through async_to_sync cannot run), yielding what it yields."""
    entered, leave, box = threading.Event(), threading.Event(), {}

    def run():
        try:
            with manager as value:
                box["value"] = value
                entered.set()
                leave.wait()
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc
        finally:
            entered.set()
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    entered.wait()
    if "error" in box:
        thread.join()
        raise box["error"]
    try:
        yield box["value"]
    finally:
        leave.set()
        thread.join()
        if "error" in box:
            raise box["error"]


@pytest.fixture
def seeded():
    """The demo data (seed_demo), loaded off this thread: Playwright runs an event loop here, and seeding
    publishes (async_to_sync) events."""

    def run():
        try:
            call_command("seed_demo", stdout=io.StringIO())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


@pytest.fixture
def staging_served(seeded, control_plane, tmp_path, settings):
    """Start one simulator agent on staging against the session's daphne, named as asked, and wait until it serves
    the pool's version (this process stores conversation logs where daphne reads them); it stops after the test."""
    started = []

    def start(node_name: str) -> Daphne:
        settings.CONVERSATION_LOG_DIR = control_plane.conversation_log_dir
        staging = Pool.objects.get(name="staging")
        _, token = node_create(actor=User.objects.get(username="sre"), name=node_name, pool=staging)
        profile = tmp_path / "fast.yaml"
        profile.write_text(FAST_PROFILE)
        agent = AgentProcess(
            name=node_name, token=token, control_plane_url=control_plane.ws_agent_url, work=tmp_path, profile=profile
        )
        agent.start()
        started.append(agent)
        wait_until(
            lambda: (
                EngineNode.objects.filter(
                    name=node_name, is_connected=True, reported_status="online", applied_version=staging.desired_version
                )
                .exclude(gateway_url="")
                .exists()
            ),
            90,
            "the node to serve the pool's version",
        )
        return control_plane

    yield start
    for process in reversed(started):
        process.stop()
