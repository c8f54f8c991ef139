"""Background work handed to a Celery worker, or in embedded mode (eager Celery) to a daemon thread of this process.

Eager tasks run inside their caller, and the work queued here lasts from seconds to minutes: the HTTP request (or
the evaluation pass) that queued it must not wait for it, so the eager run moves to its own thread.

Services start their work by the task's name (`start`), never by importing their app's tasks module: that module
imports the services it runs, so the services stay below the tasks and no import runs in a circle.
"""

import logging
import threading
from collections.abc import Callable
from importlib import import_module

from celery import Task, current_app
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

logger = logging.getLogger(__name__)

# Options of a task whose first write claims its row: a database locked or gone then is tried again, 5, 10 and 20 s
# later, and a second delivery finds the row claimed and does nothing.
CLAIM_RETRIED = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "max_retries": 3,
    "retry_backoff": 5,
    "retry_jitter": False,
}


def enqueue(
    task: Task,
    *args,
    name: str,
    queue: str | None = None,
    here: Callable[..., object] | None = None,
) -> None:
    """Send `task(*args)` to a worker on `queue` (none: the default queue); eagerly, run it on a thread called `name`.

    `here` replaces `task.apply` on that thread, for a task whose eager run needs more than one call (its own
    retries with their waits). A failure there is logged; the thread's database connections are closed at its end.
    """
    if settings.CELERY_TASK_ALWAYS_EAGER:
        threading.Thread(target=_run_here, args=(task, args, name, here), name=name, daemon=True).start()
    elif queue:
        task.apply_async(args, queue=queue)
    else:
        task.apply_async(args)


# Eager runners that replace a task's own eager run, by task name (see `runs_here`).
_RUN_HERE: dict[str, Callable[..., object]] = {}


def start(task_name: str, *args, name: str, queue: str | None = None) -> None:
    """`enqueue` the task named `task_name` (a task's name is its module's and its function's:
    "controlplane.<app>.tasks.<function>"), with the eager runner its module registered, if any."""
    task = task_named(task_name)
    enqueue(task, *args, name=name, queue=queue, here=_RUN_HERE.get(task_name))


def task_named(task_name: str) -> Task:
    """The registered task of that name; its module is imported first where nothing has imported it yet."""
    registry = current_app.tasks
    if task_name not in registry:
        import_module(task_name.rpartition(".")[0])
    return registry[task_name]


def runs_here(task_name: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Decorator: eagerly, `start(task_name, ...)` runs the decorated function on its thread instead of the task
    (a task whose eager run needs more than one call: its own retries with their waits)."""

    def register(function: Callable[..., object]) -> Callable[..., object]:
        _RUN_HERE[task_name] = function
        return function

    return register


def _run_here(task: Task, args: tuple, name: str, here: Callable[..., object] | None) -> None:
    try:
        if here is None:
            task.apply(args=args)
        else:
            here(*args)
    except Exception:
        logger.exception("%s: %s%r failed", name, task.name, args)
    finally:
        connections.close_all()
