"""A replay run cannot become an attack on the fleet: production pools are refused without an SRE's reasoned
override, only the pool's own nodes can be targeted, and QPS, duration and total requests are capped by settings
(each refusal names its field). Exports cannot carry a spreadsheet formula out of a log."""

import json

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.replays.lifecycle import replay_start
from controlplane.replays.models import ReplayRequest, ReplayRun
from tests.factories import pools
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db

BASE = {"log": "festival-log", "reason": "baseline", "qps": 5}


@pytest.fixture
def world(users, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, prod = pools(users["sre"])
    node_create(actor=users["sre"], name="stage-1", pool=staging)
    node_create(actor=users["sre"], name="prod-1", pool=prod)
    log = store_log(users["agent"], log_lines(20))
    return {"staging": staging, "prod": prod, "log": log}


def create(api_for, role, **fields):
    return api_for(role).post("/api/v1/replays/", {**BASE, **fields}, format="json")


def field_of(response) -> str:
    return response.json()["detail"][0]["path"]


def test_a_production_pool_is_refused_without_an_override(world, api_for):
    for role in ("agent", "sre", "admin"):
        response = create(api_for, role, pool="prod-main")
        assert response.status_code == 400 and field_of(response) == "pool", response.json()
        assert "production pool" in response.json()["error"]
    assert not ReplayRun.objects.exists()


def test_only_an_sre_or_admin_overrides_production_and_the_override_is_audited(world, api_for):
    refused = create(api_for, "agent", pool="prod-main", production_override_reason="I want to")
    assert refused.status_code == 403 and "only an SRE or admin" in refused.json()["error"]
    assert not ReplayRun.objects.exists()
    response = create(api_for, "sre", pool="prod-main", production_override_reason="no staging capacity tonight")
    assert response.status_code == 201, response.json()
    assert response.json()["production_override_by"] == "sre"
    entry = AuditEntry.objects.get(action="replay.production_override")
    assert entry.reason == "no staging capacity tonight" and entry.after["pool"] == "prod-main"


def test_an_override_on_a_non_production_pool_is_an_error(world, api_for):
    response = create(api_for, "sre", pool="staging", production_override_reason="just in case")
    assert response.status_code == 400 and field_of(response) == "production_override_reason"


def test_a_node_outside_the_pool_cannot_be_targeted(world, api_for):
    response = create(api_for, "agent", pool="staging", nodes=["stage-1", "prod-1"])
    assert response.status_code == 400 and field_of(response) == "nodes"
    assert "prod-1" in response.json()["error"] and not ReplayRun.objects.exists()
    response = create(api_for, "agent", pool="staging", nodes=["stage-1", "stage-1"])
    assert response.status_code == 400 and field_of(response) == "nodes"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"qps": 501}, "qps"),
        ({"qps": 0}, "qps"),
        ({"qps": "fast"}, "qps"),
        ({"qps": None}, "qps"),
        ({"duration_cap_s": 4 * 3600 + 1}, "duration_cap_s"),
        ({"duration_cap_s": 0}, "duration_cap_s"),
        ({"qps": 500, "duration_cap_s": 3600}, "duration_cap_s"),  # 1.8 M requests over the 200,000 cap
        ({"selection": "sample", "sample_size": 10**9}, "sample_size"),
        ({"selection": "top"}, "top_n"),
        ({"selection": "everything"}, "selection"),
        ({"pacing": "asap"}, "pacing"),
        ({"pacing": "log_times", "time_scale": 0}, "time_scale"),
        ({"arrival": "burst"}, "arrival"),
        ({"reason": " "}, "reason"),
    ],
)
def test_bounds_are_refused_naming_the_field(world, api_for, fields, field):
    body = {**BASE, "pool": "staging", **fields}
    response = api_for("agent").post("/api/v1/replays/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"], response.json()
    assert not ReplayRun.objects.exists()


def test_the_caps_follow_the_settings(world, api_for, settings):
    settings.REPLAY_MAX_QPS = 10
    response = create(api_for, "agent", pool="staging", qps=11)
    assert response.status_code == 400 and field_of(response) == "qps"


def test_a_log_paced_too_fast_fails_at_start_naming_time_scale(world, users, settings):
    from controlplane.replays.services import replay_run_create

    settings.REPLAY_MAX_QPS = 5
    EngineNode.objects.filter(name="stage-1").update(
        is_connected=True,
        last_seen_at=timezone.now(),
        reported_status="online",
        gateway_url="http://127.0.0.1:9",
        agent_address="127.0.0.1",
    )
    # 20 conversations one second apart, replayed 100x faster: 20 requests within 0.2 s.
    run = replay_run_create(
        actor=users["agent"],
        pool=world["staging"],
        log=world["log"],
        reason="fast",
        pacing="log_times",
        time_scale=0.01,
    )
    assert replay_start(run.pk) == []
    run.refresh_from_db()
    assert run.status == "failed" and run.error.startswith("time_scale:") and run.client_key_id is None


def test_a_chosen_node_that_does_not_serve_fails_the_start_naming_it(world, users):
    from controlplane.replays.services import replay_run_create

    run = replay_run_create(
        actor=users["agent"], pool=world["staging"], log=world["log"], reason="x", qps=5, nodes=["stage-1"]
    )
    replay_start(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and "stage-1" in run.error and run.error.startswith("nodes:")


def test_exported_cells_cannot_start_a_formula(world, users, api_for):
    from controlplane.replays.services import replay_run_create

    run = replay_run_create(actor=users["agent"], pool=world["staging"], log=world["log"], reason="x", qps=5)
    ReplayRequest.objects.create(
        run=run, seq=0, conversation_id="=HYPERLINK(\"http://evil\")", node_name="stage-1", scheduled_at=0,
        error="+cmd|' /C calc'!A0",
    )  # fmt: skip
    body = b"".join(api_for("oncall").get(f"/api/v1/replays/{run.pk}/export/").streaming_content).decode()
    assert "'=HYPERLINK" in body and "'+cmd" in body


def test_nul_bytes_and_odd_names_get_a_400_or_nothing_never_a_500(world, api_for):
    response = create(api_for, "agent", pool="staging", nodes=["stage\x00-1"])
    assert response.status_code == 400 and field_of(response) == "nodes"
    response = create(api_for, "agent", pool="staging", nodes=[{"name": "stage-1"}])
    assert response.status_code == 400 and field_of(response) == "nodes"
    assert create(api_for, "agent", pool="stag\x00ing").status_code == 400
    listed = api_for("oncall").get("/api/v1/replays/", {"pool": "stag\x00ing"})
    assert listed.status_code == 200 and listed.json()["results"] == []


def test_hostile_ladders_are_refused_naming_the_field(world, api_for):
    cases = [
        ({"qps_steps": [5, 10], "step_s": 5}, "qps"),  # qps beside a ladder
        ({"qps_steps": [5], "step_s": 5}, "qps_steps"),  # one step is no ladder
        ({"qps_steps": [1] * 5000, "step_s": 5}, "qps_steps"),  # a huge list is refused before it is read
        ({"qps_steps": [10, 5], "step_s": 5}, "qps_steps"),  # going down
        ({"qps_steps": [5, 5], "step_s": 5}, "qps_steps"),
        ({"qps_steps": [5, 1e9], "step_s": 5}, "qps_steps[1]"),  # past the QPS cap
        ({"qps_steps": [5, 10]}, "step_s"),
        ({"qps_steps": [5, 10], "step_s": 0}, "step_s"),
        ({"qps_steps": [5, 10], "step_s": 10**9}, "step_s"),
        ({"qps_steps": [5, "ten"], "step_s": 5}, "qps_steps"),
        # The P99 line each step is judged against: a line of zero or below, or past ten minutes, judges nothing.
        ({"qps_steps": [5, 10], "step_s": 5, "slo_p99_s": 0}, "slo_p99_s"),
        ({"qps_steps": [5, 10], "step_s": 5, "slo_p99_s": -1.8}, "slo_p99_s"),
        ({"qps_steps": [5, 10], "step_s": 5, "slo_p99_s": 1e308}, "slo_p99_s"),
        ({"qps_steps": [5, 10], "step_s": 5, "slo_p99_s": "fast"}, "slo_p99_s"),
        ({"qps_steps": [5, 10], "step_s": 5, "slo_p99_s": [1.8]}, "slo_p99_s"),
    ]
    for fields, field in cases:
        body = {"pool": "staging", "pacing": "ladder", **fields}
        if "qps" not in fields and field != "qps":
            body["qps"] = None
        response = create(api_for, "agent", **body)
        assert response.status_code == 400, (fields, response.json())
        assert field in json.dumps(response.json()), (fields, response.json())
    # Steps on a run that is not a ladder are refused too, rather than silently ignored.
    response = create(api_for, "agent", pool="staging", qps_steps=[5, 10], step_s=5)
    assert response.status_code == 400 and field_of(response) == "qps_steps"
    # So is a P99 line: only a ladder judges its steps against one.
    response = create(api_for, "agent", pool="staging", slo_p99_s=2.0)
    assert response.status_code == 400 and field_of(response) == "slo_p99_s", response.json()
    assert not ReplayRun.objects.exists()


def test_a_ladder_past_the_request_cap_is_refused(world, api_for, settings):
    settings.REPLAY_MAX_REQUESTS = 1000
    response = create(api_for, "agent", pool="staging", pacing="ladder", qps=None, qps_steps=[20, 40], step_s=30)
    assert response.status_code == 400 and field_of(response) == "qps_steps", response.json()
    assert "1800 requests" in response.json()["error"]


def test_a_pool_made_production_after_the_replay_was_queued_refuses_its_start(world, users):
    from controlplane.replays.services import replay_run_create

    run = replay_run_create(actor=users["agent"], pool=world["staging"], log=world["log"], reason="x", qps=5)
    EngineNode.objects.filter(name="stage-1").update(
        is_connected=True,
        last_seen_at=timezone.now(),
        reported_status="online",
        gateway_url="http://127.0.0.1:9",
        agent_address="127.0.0.1",
    )
    Pool.objects.filter(pk=world["staging"].pk).update(is_production=True)  # e.g. through the admin

    assert replay_start(run.pk) == []

    run.refresh_from_db()
    assert run.status == "failed" and run.error.startswith("pool: staging became a production pool"), run.error
    assert "production_override_reason" in run.error
    assert run.client_key_id is None and run.targets == [] and not ReplayRequest.objects.filter(run=run).exists()


def test_a_replay_queued_with_an_override_is_not_refused_for_being_on_production(world, users):
    from controlplane.replays.services import replay_run_create

    run = replay_run_create(
        actor=users["sre"],
        pool=world["prod"],
        log=world["log"],
        reason="x",
        qps=5,
        production_override_reason="no staging capacity tonight",
    )
    replay_start(run.pk)
    run.refresh_from_db()
    # It gets past the pool check to the next one: prod-1 is not serving.
    assert run.status == "failed" and run.error.startswith("pool: no node of prod-main is online"), run.error
