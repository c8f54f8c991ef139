"""Background work: eagerly, a task runs on a named daemon thread and its failure is logged; otherwise it is sent to
the broker on the queue asked for (the default one when none is), as a worker would receive it. The tasks that
claim their row retry database errors with the shared options."""

import ast
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from celery import Celery
from django.db import InterfaceError, OperationalError
from kombu import Exchange, Queue

from controlplane.convlogs.tasks import log_analysis_task
from controlplane.datasets.tasks import intent_model_train_task
from controlplane.lib import background
from controlplane.lib.background import enqueue
from controlplane.replays.tasks import replay_start_task

# A Celery app of the test's own on the in-memory broker, configured as settings configures ours.
app = Celery("background-test", broker="memory://", set_as_current=False)
app.conf.task_eager_propagates = True
app.conf.task_always_eager = False

ran: list[tuple[str, tuple]] = []


@app.task(name="background-test.record")
def record(*args) -> None:
    thread = threading.current_thread()
    ran.append((thread.name, thread.daemon, args))


@app.task(name="background-test.fail")
def fail(*args) -> None:
    raise RuntimeError("the task broke")


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"waited 10 s for {what}"
        time.sleep(0.01)


def logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "controlplane.lib.background"]


def received(queue_name: str) -> list[tuple[str, list]]:
    queue = Queue(queue_name, Exchange(queue_name, type="direct"), routing_key=queue_name)
    messages = []
    with app.connection_for_read() as connection, connection.SimpleQueue(queue) as simple:
        while True:
            try:
                message = simple.get(timeout=0.2)
            except simple.Empty:
                return messages
            args, _kwargs, _embed = message.decode()
            messages.append((message.headers["task"], list(args)))
            message.ack()


@pytest.fixture(autouse=True)
def fresh():
    ran.clear()


def test_eagerly_the_task_runs_on_its_own_named_thread(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    name = f"background-test-{os.getpid()}-run"
    enqueue(record, 7, "key", name=name, queue="ignored-when-eager")
    wait_for(lambda: ran, "the task to run")
    assert ran == [(name, True, (7, "key"))]


def test_eagerly_a_failure_is_logged_with_the_thread_and_task_and_goes_no_further(settings, caplog):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    name = f"background-test-{os.getpid()}-fail"
    with caplog.at_level(logging.ERROR, logger="controlplane.lib.background"):
        enqueue(fail, 3, name=name)
        wait_for(lambda: logged(caplog), "the failure to be logged")
    [line] = logged(caplog)
    assert f"{name}: background-test.fail(3,) failed" == line.getMessage()
    assert "the task broke" in caplog.text


def test_eagerly_here_replaces_the_task_and_its_failure_is_logged_too(settings, caplog):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    calls = []

    def here(*args):
        calls.append(args)
        raise ValueError("own retries gave up")

    name = f"background-test-{os.getpid()}-here"
    with caplog.at_level(logging.ERROR, logger="controlplane.lib.background"):
        enqueue(record, 5, name=name, here=here)
        wait_for(lambda: logged(caplog), "the failure to be logged")
    assert calls == [(5,)] and ran == [], "the task itself is not applied when `here` is given"
    assert "own retries gave up" in caplog.text


def test_otherwise_the_task_goes_to_the_broker_on_the_queue_asked_for(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    queue = f"background-test-{os.getpid()}"
    enqueue(record, 1, 2, "k", name="unused", queue=queue)
    assert received(queue) == [("background-test.record", [1, 2, "k"])]
    assert ran == [], "nothing runs in this process"


@pytest.mark.parametrize("queue", [None, ""])
def test_otherwise_without_a_queue_the_task_goes_to_the_default_one(settings, queue):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    enqueue(record, 9, name="unused", queue=queue)
    default = app.conf.task_default_queue
    assert ("background-test.record", [9]) in received(default)
    assert ran == []


def test_the_claiming_tasks_retry_database_errors_with_backoff():
    for task in (log_analysis_task, intent_model_train_task, replay_start_task):
        assert task.acks_late and task.ignore_result, task.name
        assert tuple(task.autoretry_for) == (OperationalError, InterfaceError), task.name
        assert (task.max_retries, task.retry_backoff, task.retry_jitter) == (3, 5, False), task.name


def started_task_names() -> set[str]:
    """Every task name a service passes to `background.start`, read from the source."""
    names = set()
    for path in (Path(__file__).resolve().parents[2] / "controlplane").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "start"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "background"
            ):
                [first, *_] = node.args
                assert isinstance(first, ast.Constant), f"{path}:{node.lineno}: a task name is a literal"
                names.add(first.value)
    return names


def test_services_start_their_work_by_the_name_of_a_registered_task():
    names = started_task_names()
    assert {
        "controlplane.alerts.tasks.alert_notification_send",
        "controlplane.convlogs.tasks.log_analysis_task",
        "controlplane.datasets.tasks.intent_model_train_task",
        "controlplane.replays.tasks.replay_start_task",
        "controlplane.tuning.tasks.study_run_task",
    } <= names
    for name in names:
        assert background.task_named(name).name == name


def test_an_eager_webhook_delivery_keeps_its_own_retries(settings, monkeypatch):
    """The evaluation pass starts deliveries by name; eagerly the alerts app's runner replaces the task."""
    from controlplane.alerts import tasks as alert_tasks

    settings.CELERY_TASK_ALWAYS_EAGER = True
    seen = []
    monkeypatch.setattr(background, "enqueue", lambda task, *args, **options: seen.append((task.name, args, options)))
    background.start("controlplane.alerts.tasks.alert_notification_send", 4, name="alert-webhook-4")
    assert seen == [
        (
            "controlplane.alerts.tasks.alert_notification_send",
            (4,),
            {"name": "alert-webhook-4", "queue": None, "here": alert_tasks._send_here},
        )
    ]
