"""Past one process: a replay run handed to real Celery workers (prefork, Redis broker) is split into shares, each
sent from its own worker process, against three simulator agents; together they keep the asked rate and write
every row once. (Simulated nodes: the latencies are the simulator's.)"""

import os
import subprocess
import sys

import pytest
import redis

from controlplane.celery import app
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.services import replay_run_create
from tests.engine_node.fleet import wait_until
from tests.live_server import ROOT, subprocess_database_url
from tests.replays.logs import log_lines, store_log
from tests.replays.test_replay_fleet import fleet  # noqa: F401 - fixture, found by name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]


@pytest.fixture
def workers(settings, tmp_path):
    if not settings.REDIS_URL:
        pytest.skip("needs Redis (REDIS_URL) as the Celery broker")
    # A queue of this test's own: other Celery users of the same Redis database never see these tasks.
    queue = f"replay-test-{os.getpid()}"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.REPLAY_TASK_QUEUE = queue
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CONVERSATION_LOG_DIR": str(settings.CONVERSATION_LOG_DIR),
        "REPLAY_SHARE_QPS": "10",
        "REPLAY_TASK_QUEUE": queue,
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log = open(tmp_path / "celery.log", "w")  # noqa: SIM115 - kept open for the process's life
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q", queue, "-c", "4", "--pool", "prefork"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        app.conf.task_always_eager = eager
        # The queue's bookkeeping in Redis goes with it.
        broker = redis.Redis.from_url(settings.REDIS_URL)
        broker.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        broker.close()


def test_shares_run_on_separate_worker_processes_and_keep_the_rate(fleet, workers, agent):  # noqa: F811
    log = store_log(agent, log_lines(300))
    run = replay_run_create(
        actor=agent, pool=fleet["pool"], log=log, reason="three shares", qps=25, arrival="uniform", duration_cap_s=8
    )
    run = wait_until(
        lambda: (r := ReplayRun.objects.get(pk=run.pk)).status in ReplayRun.FINISHED and r, 90, "the run to finish"
    )
    assert run.status == "succeeded", run.error
    assert run.shares == 3 and run.shares_finished == 3
    assert run.planned == run.sent == run.done == 201  # 0 .. 8 s at 25 QPS
    rows = ReplayRequest.objects.filter(run=run)
    assert sorted(rows.values_list("seq", flat=True)) == list(range(201)) and rows.filter(ok=True).count() == 201
    assert abs(run.achieved_qps - 25) / 25 < 0.02, run.achieved_qps
