"""`run_periodic`: every CELERY_BEAT_SCHEDULE entry run in-process at its period (embedded mode's beat + worker)."""

import asyncio
import itertools
import logging
import os
import re
import subprocess
import sys
import threading
import time

import aiohttp
import pytest
from celery import shared_task
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.test import Client

from controlplane.alerts.management.commands.run_periodic import Entry, run_forever
from controlplane.alerts.models import Alert, EvaluatorLease
from tests.live_server import ROOT, free_port, wait_for_port

RUNS: list[float] = []
LOCKED = threading.Event()


@shared_task(name="tests.alerts.record_run")
def record_run(label: str) -> None:
    RUNS.append(time.monotonic())


@shared_task(name="tests.alerts.locked_then_fine")
def locked_then_fine() -> None:
    """The database locked while LOCKED is set (as SQLite answers a writer past its busy timeout), then fine."""
    RUNS.append(time.monotonic())
    if LOCKED.is_set():
        raise OperationalError("database is locked")


@pytest.mark.django_db
def test_once_runs_the_alert_evaluation_of_the_beat_schedule(fleet, clock):
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    call_command("run_periodic", "--once", "--only", "alerts-evaluate")
    assert Alert.objects.get(rule__name="node-lost", name="gpu-1").state == "firing"
    assert EvaluatorLease.objects.get(pk=1).last_finished_at is not None


def test_unknown_entries_are_refused(settings):
    with pytest.raises(CommandError, match="no CELERY_BEAT_SCHEDULE entry named nope"):
        call_command("run_periodic", "--once", "--only", "nope")
    settings.CELERY_BEAT_SCHEDULE = {"broken": {"task": "no.such.task", "schedule": 1.0}}
    with pytest.raises(CommandError, match="no task named"):
        call_command("run_periodic", "--once")


def test_an_entry_runs_at_its_period_until_stopped():
    RUNS.clear()
    entry = Entry("record", {"task": "tests.alerts.record_run", "schedule": 0.2, "args": ["x"]})
    stop = threading.Event()
    thread = threading.Thread(target=run_forever, args=(entry, stop))
    thread.start()
    time.sleep(1.1)
    stop.set()
    thread.join(timeout=5)
    assert 5 <= len(RUNS) <= 7, RUNS
    gaps = [b - a for a, b in itertools.pairwise(RUNS)]
    assert all(0.15 < gap < 0.35 for gap in gaps), gaps


@pytest.mark.subprocess
def test_embedded_mode_evaluates_inside_the_server_and_browsers_hear_it(tmp_path):
    """`run_periodic --serve` on SQLite with the in-memory layer: a lost node's alert reaches a browser socket."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env.update(CONTROLPLANE_VAR_DIR=str(tmp_path), DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost")
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True, timeout=180)
    setup = (
        "from django.utils import timezone\n"
        "from controlplane.accounts.services import user_create\n"
        "from controlplane.nodes.models import EngineNode\n"
        "from controlplane.nodes.services.engine_nodes import node_create\n"
        "from controlplane.nodes.services.pools import pool_create\n"
        "sre = user_create(actor=None, username='sre', password='sre-test-password', role='sre')\n"
        "pool = pool_create(actor=sre, name='prod-main', is_production=True)\n"
        "node, _ = node_create(actor=sre, name='gpu-1', pool=pool)\n"
        "EngineNode.objects.filter(pk=node.pk).update(is_connected=True, connected_at=timezone.now(),"
        " last_seen_at=timezone.now())\n"
    )
    subprocess.run([*manage, "shell", "-c", setup], cwd=ROOT, env=env, check=True, timeout=120)
    port = free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [*manage, "run_periodic", "--serve", f"127.0.0.1:{port}"], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        wait_for_port(port, 30, server)
        event = asyncio.run(_lose_node_while_watching(f"http://127.0.0.1:{port}", env))
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
    assert event["type"] == "alerts.changed", (tmp_path / "server.log").read_text()[-2000:]
    assert [(a["rule"], a["name"], a["state"]) for a in event["alerts"]] == [("node-lost", "gpu-1", "firing")]


async def _lose_node_while_watching(base: str, env: dict) -> dict:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:  # an IP host
        async with session.get(f"{base}/login/") as response:
            await response.read()
        csrf = next(c.value for c in session.cookie_jar if c.key == "csrftoken")
        form = {"username": "sre", "password": "sre-test-password", "csrfmiddlewaretoken": csrf}
        async with session.post(f"{base}/login/", data=form, headers={"Referer": f"{base}/login/"}) as response:
            assert response.status == 200 and "sessionid" in {c.key for c in session.cookie_jar}
        async with session.ws_connect(f"{base.replace('http', 'ws')}/ws/alerts/", headers={"Origin": base}) as ws:
            lose = "from controlplane.nodes.models import EngineNode; EngineNode.objects.update(is_connected=False)"
            process = await asyncio.create_subprocess_exec(
                sys.executable, "manage.py", "shell", "-c", lose, cwd=ROOT, env=env
            )
            assert await process.wait() == 0
            taken = await ws.receive_json(timeout=20)  # sent on subscribing (controlplane/lib/consumers.py)
            assert taken["type"] == "sequence.taken", taken
            return await ws.receive_json(timeout=20)


@pytest.mark.django_db
def test_an_entry_whose_task_hits_a_database_error_keeps_running_and_shows_on_the_health_line(oncall, caplog):
    caplog.set_level(logging.INFO)
    RUNS.clear()
    LOCKED.set()
    entry = Entry("flaky-entry", {"task": "tests.alerts.locked_then_fine", "schedule": 0.1})
    stop = threading.Event()
    thread = threading.Thread(target=run_forever, args=(entry, stop))
    thread.start()
    browser = Client()
    browser.force_login(oncall)
    try:
        _wait(lambda: len(RUNS) >= 3, "three failed runs")
        page = browser.get("/").content.decode()
        health = browser.get("/healthz")
        failed_runs = len(RUNS)
        LOCKED.clear()
        _wait(lambda: len(RUNS) >= failed_runs + 2, "runs after the failures", timeout_s=40)
        recovered = browser.get("/healthz")
    finally:
        LOCKED.clear()
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    # While failing: the overview names the loop, its last success (none yet) and its last error; /healthz is 503.
    assert "flaky-entry</b> is failing" in page and "last success never" in page, page
    assert "periodic task tests.alerts.locked_then_fine: OperationalError: database is locked" in page
    assert health.status_code == 503
    flaky = next(loop for loop in health.json()["loops"] if loop["loop"] == "flaky-entry")
    assert flaky["state"] == "failing" and flaky["failures"] >= 1 and "last_error" not in flaky
    # It kept running, backing off (0.2, 0.4, 0.8 s ... after the failures), and recovered.
    gaps = [b - a for a, b in itertools.pairwise(RUNS)]
    assert all(gap >= 0.15 * 2**i for i, gap in enumerate(gaps[:3])), gaps
    flaky = next(loop for loop in recovered.json()["loops"] if loop["loop"] == "flaky-entry")
    assert (flaky["state"], flaky["failures"]) == ("ok", 0) and flaky["last_success_at"]
    # Logged once with its traceback, then its recovery; nothing per run.
    lines = [r for r in caplog.records if r.name == "controlplane.loops"]
    assert [r.levelname for r in lines] == ["ERROR", "INFO"], [r.getMessage() for r in lines]
    assert lines[0].exc_info is not None
    assert re.match(r"flaky-entry recovered after (\d+) failure\(s\)", lines[1].getMessage()), lines[1].getMessage()
    assert int(re.match(r"\D+(\d+)", lines[1].getMessage()).group(1)) >= 3
    assert not [r for r in caplog.records if r.name.startswith("celery")]


def _wait(predicate, what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.02)
