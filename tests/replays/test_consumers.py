"""Live replay progress over the real ASGI app: a run's page and the list get `replay.progress` on a cancel;
anonymous browsers are refused."""

import pytest

from controlplane.replays.consumers import FORBIDDEN
from controlplane.replays.models import ReplayRun
from controlplane.replays.services import replay_run_cancel
from tests.datasets.test_training import session_headers
from tests.factories import pools
from tests.progress_sockets import anonymous_connect, events_on_change
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancel_reaches_the_runs_page_and_the_list(users, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, _ = pools(users["sre"])
    agent = users["agent"]
    # A queued run as a row (the service would hand it to its start task at once, which fails it: no node serves).
    log = store_log(agent, log_lines(3))
    run = ReplayRun.objects.create(
        pool=staging, log=log, log_name=log.name, qps=1, duration_cap_s=60, created_by=agent, reason="x"
    )
    headers = session_headers(users["oncall"])

    events, nothing = events_on_change(
        headers,
        f"/ws/replays/{run.pk}/",
        "/ws/replays/",
        f"/ws/replays/{run.pk + 1}/",
        lambda: replay_run_cancel(actor=agent, run=run, reason="wrong log"),
    )
    assert [(e["type"], e["run_id"], e["status"]) for e in events] == [("replay.progress", run.pk, "cancelled")] * 2
    assert nothing


def test_anonymous_browsers_are_refused(users):
    assert anonymous_connect("/ws/replays/") == (False, FORBIDDEN)
