"""The replay API: start, list with filters, detail, cancel (twice is a 409), request rows paged, streamed export."""

import json

import pytest

from controlplane.replays.models import ReplayRequest, ReplayRun
from tests.factories import pools
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(users, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, _ = pools(users["sre"])
    return {"staging": staging, "log": store_log(users["agent"], log_lines(5))}


def start(api_for, **fields):
    body = {"pool": "staging", "log": "festival-log", "reason": "baseline", "qps": 5, **fields}
    return api_for("agent").post("/api/v1/replays/", body, format="json")


def test_start_list_and_detail(world, api_for):
    response = start(api_for, label="cap 256 baseline", selection="top", top_n=3, arrival="uniform")
    assert response.status_code == 201, response.json()
    run = response.json()
    assert (run["status"], run["pool"], run["log"], run["label"]) == (
        "queued",
        "staging",
        "festival-log",
        "cap 256 baseline",
    )
    assert (run["selection"], run["top_n"], run["sample_size"], run["created_by"]) == ("top", 3, None, "agent")
    listed = api_for("oncall").get("/api/v1/replays/", {"status": "queued", "pool": "staging"}).json()
    assert [r["id"] for r in listed["results"]] == [run["id"]]
    assert api_for("oncall").get("/api/v1/replays/", {"status": "running"}).json()["results"] == []
    bad = api_for("oncall").get("/api/v1/replays/", {"status": "done"})
    assert bad.status_code == 400 and "status" in bad.json()["error"]
    assert api_for("oncall").get(f"/api/v1/replays/{run['id']}/").json()["reason"] == "baseline"


def test_unknown_pool_or_log_or_field_is_named(world, api_for):
    assert "pool" in start(api_for, pool="nowhere").json()["error"]
    assert "log" in start(api_for, log="nothing").json()["error"]
    response = start(api_for, qsp=5)
    assert response.status_code == 400 and "qsp" in json.dumps(response.json())


def test_cancel_a_queued_run_then_again(world, api_for):
    run_id = start(api_for).json()["id"]
    response = api_for("sre").post(f"/api/v1/replays/{run_id}/cancel/", {"reason": "wrong log"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert response.json()["cancelled_by"] == "sre"
    again = api_for("sre").post(f"/api/v1/replays/{run_id}/cancel/", {"reason": "again"}, format="json")
    assert again.status_code == 409 and f"replay {run_id} is already cancelled" in again.json()["error"]
    assert api_for("sre").post("/api/v1/replays/999999/cancel/", {"reason": "x"}, format="json").status_code == 404


def test_cancel_a_running_run_asks_it_to_stop_once(world, api_for):
    run_id = start(api_for).json()["id"]
    ReplayRun.objects.filter(pk=run_id).update(status="running")
    blank = api_for("sre").post(f"/api/v1/replays/{run_id}/cancel/", {"reason": " "}, format="json")
    assert blank.status_code == 400 and "reason" in json.dumps(blank.json())
    assert ReplayRun.objects.get(pk=run_id).status == "running", "a refused cancel changes nothing"
    response = api_for("sre").post(f"/api/v1/replays/{run_id}/cancel/", {"reason": "wrong log"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelling"
    assert ReplayRun.objects.get(pk=run_id).finished_at is None
    again = api_for("sre").post(f"/api/v1/replays/{run_id}/cancel/", {"reason": "again"}, format="json")
    assert again.status_code == 409 and f"replay {run_id} is already being cancelled" in again.json()["error"]


def test_request_rows_are_paged_in_order_and_exported_whole(world, api_for):
    run = ReplayRun.objects.get(pk=start(api_for).json()["id"])
    ReplayRequest.objects.bulk_create(
        ReplayRequest(
            run=run, seq=seq, conversation_id=f"c{seq}", node_name="n1", scheduled_at=seq / 5, ok=seq % 7 != 0
        )
        for seq in reversed(range(120))
    )
    page = api_for("oncall").get(f"/api/v1/replays/{run.pk}/requests/").json()
    assert page["count"] == 120 and [r["seq"] for r in page["results"]] == list(range(50))
    failed = api_for("oncall").get(f"/api/v1/replays/{run.pk}/requests/", {"ok": "false"}).json()
    assert failed["count"] == 18 and all(not r["ok"] for r in failed["results"])
    response = api_for("oncall").get(f"/api/v1/replays/{run.pk}/export/")
    assert response["Content-Type"].startswith("text/csv")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0].startswith("seq,conversation_id,turn,intent") and len(lines) == 121
    response = api_for("oncall").get(f"/api/v1/replays/{run.pk}/export/", {"format": "jsonl"})
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [r["seq"] for r in rows] == list(range(120)) and rows[1]["conversation_id"] == "c1"
    bad = api_for("oncall").get(f"/api/v1/replays/{run.pk}/export/", {"format": "xlsx"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]


def test_a_run_whose_shares_never_report_is_ended_failed_and_its_key_revoked(world, users):
    from django.utils import timezone

    from controlplane.nodes.services.client_keys import client_key_create
    from controlplane.replays.lifecycle import replay_runs_reap
    from controlplane.replays.services import replay_run_create

    run = replay_run_create(actor=users["agent"], pool=world["staging"], log=world["log"], reason="x", qps=5)
    key, _ = client_key_create(actor=users["agent"], name=f"replay-{run.pk}", pools=[world["staging"]])
    ReplayRun.objects.filter(pk=run.pk).update(
        status="running", started_at=timezone.now(), schedule_start=1000.0, duration_cap_s=60, client_key=key, shares=2
    )
    fresh = replay_run_create(actor=users["agent"], pool=world["staging"], log=world["log"], reason="y", qps=5)
    # Still within its request timeout and grace: left alone.
    ReplayRun.objects.filter(pk=fresh.pk).update(status="running", started_at=timezone.now(), schedule_start=1100.0)
    assert replay_runs_reap(now=1000.0 + 60 + 120 + 59) == []
    assert replay_runs_reap(now=1000.0 + 60 + 120 + 61) == [run.pk]
    assert ReplayRun.objects.get(pk=fresh.pk).status == "running"
    run.refresh_from_db()
    key.refresh_from_db()
    assert run.status == "failed" and "did not report" in run.error and run.finished_at is not None
    assert key.revoked_at is not None


def test_a_ladder_run_is_started_with_its_steps_and_its_duration_is_theirs(world, api_for):
    response = start(api_for, qps=None, pacing="ladder", qps_steps=[10, 20, 40], step_s=15, duration_cap_s=5)
    assert response.status_code == 201, response.json()
    run = response.json()
    assert (run["pacing"], run["qps"], run["qps_steps"], run["step_s"]) == ("ladder", None, [10.0, 20.0, 40.0], 15)
    assert run["duration_cap_s"] == 45  # three steps of 15 s, whatever the cap asked
    entry = ReplayRun.objects.get(pk=run["id"])
    assert entry.ladder.qps_steps == (10.0, 20.0, 40.0) and entry.ladder.step_s == 15.0
    # Judged against the report's line unless the run names its own.
    assert run["slo_p99_s"] == 1.8 and entry.ladder.p99_max_s == 1.8
    response = start(api_for, qps=None, pacing="ladder", qps_steps=[10, 20], step_s=15, slo_p99_s=19.2)
    assert response.status_code == 201 and response.json()["slo_p99_s"] == 19.2, response.json()
    assert ReplayRun.objects.get(pk=response.json()["id"]).ladder.p99_max_s == 19.2
