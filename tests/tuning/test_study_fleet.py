"""A small study end to end on a simulator agent (real agent, real daphne, Postgres/Redis as configured): each trial's
candidate is saved, published to staging, ACKed after the engine's restart (a cold field), replayed and scored; the
best is an unpublished version and staging returns to its version.

The node is simulated (engine_node.simulator): the latencies here are the simulator's, not vLLM measurements.
"""

import math

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.replays.models import ReplayRun
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.services import study_cancel, study_create
from tests.engine_node.fleet import AgentProcess, wait_until
from tests.factories import legal_whitelist, template_with_versions
from tests.live_server import Daphne
from tests.replays.logs import log_lines, store_log

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

# Replies of ~24 tokens at half the default step time: ~0.12 s each alone, so one sequence at a time cannot keep up
# with 20 QPS while 32 can.
PROFILE = """
latency:
  time_scale: 0.5
reply_length:
  median: 24
  sigma: 0.3
  min: 8
  max: 48
"""


@pytest.fixture
def fleet(tmp_path, sre, settings):
    settings.CONVERSATION_LOG_DIR = tmp_path / "logs"
    profile = tmp_path / "fast.yaml"
    profile.write_text(PROFILE)
    server = Daphne(tmp_path)
    server.start()
    legal_whitelist(sre)
    pool = pool_create(actor=sre, name="staging", is_production=False)
    node, token = node_create(actor=sre, name="sim-1", pool=pool)
    agent = AgentProcess(
        name=node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
    )
    try:
        agent.start()
        template, (v1,) = template_with_versions(sre)
        pool_publish(actor=sre, pool=pool, version=v1, reason="tuning target")
        wait_until(
            lambda: (
                EngineNode.objects.filter(is_connected=True, reported_status="online", applied_version=v1)
                .exclude(gateway_url="")
                .exists()
            ),
            60,
            "the node online with v1",
        )
        yield {"pool": pool, "version": v1, "template": template, "log": store_log(sre, log_lines(200))}
    finally:
        agent.stop()
        server.stop()


def finished(study_id: int, timeout_s: float) -> TuningStudy:
    return wait_until(
        lambda: (s := TuningStudy.objects.get(pk=study_id)).status in ("succeeded", "failed", "cancelled") and s,
        timeout_s,
        "the study to end",
        interval_s=0.5,
    )


def test_a_two_trial_grid_over_a_cold_field_measures_each_candidate_and_keeps_the_best_as_a_draft(fleet, sre):
    study = study_create(
        actor=sre,
        pool=fleet["pool"],
        base_version=fleet["version"],
        log=fleet["log"],
        space=[{"path": "engine.max_num_seqs", "type": "choice", "choices": [1, 32]}],
        objective="min_p99",
        replay={"qps": 20, "duration_s": 3, "arrival": "uniform", "repeats": 2},
        constraints={"p99_max_s": 30, "error_rate_max": 0.5},
        budget=2,
        sampler="grid",
        seed=1,
        reason="max_num_seqs on the simulator",
    )
    study = finished(study.pk, 240)
    assert study.status == "succeeded", study.error
    trials = list(study.trials.order_by("number").select_related("version", "replay_run"))
    assert [t.state for t in trials] == ["complete", "complete"]
    by_seqs = {t.params["engine.max_num_seqs"]: t for t in trials}
    assert set(by_seqs) == {1, 32}
    for trial in trials:
        # Two replays per trial, each linked to the trial, with seeds seed and seed + 1; the trial scores their median.
        (step,) = trial.steps
        runs = [ReplayRun.objects.get(pk=r["run"]) for r in step["repeats"]]
        assert [r.seed for r in runs] == [1, 2] and trial.replay_run == runs[-1] and step["run"] == runs[-1].pk
        assert [r.label for r in runs] == [
            f"study {study.pk} trial {trial.number} @ 20 QPS (repeat {i} of 2)" for i in (1, 2)
        ]
        for run in runs:
            # The replay ran on the candidate: the pool's version when it started is the trial's own.
            assert run.status == "succeeded" and run.template_version == trial.version
            assert run.template_hash == trial.version.content_hash
        assert trial.version.params["engine"]["max_num_seqs"] == trial.params["engine.max_num_seqs"]
        p99s = [r["p99_s"] for r in step["repeats"]]
        assert trial.value == trial.measured["p99_s"] == pytest.approx(sum(p99s) / 2) and min(p99s) > 0
        assert trial.measured["requests"] == sum(r.planned for r in runs) >= 120
        assert trial.is_feasible
    # One sequence at a time queues the rest: its P99 is the worse one, so the best is 32.
    assert by_seqs[1].value > by_seqs[32].value
    assert study.best_trial == by_seqs[32] and study.trials_done == 2
    # Staging is back on v1; the best candidate is a saved version, never published by the study except as a trial.
    assert Pool.objects.get(pk=fleet["pool"].pk).desired_version == fleet["version"]
    reasons = list(AuditEntry.objects.filter(action="pool.publish").order_by("id").values_list("reason", flat=True))
    assert reasons[-3:] == [
        f"study {study.pk} trial 1: max_num_seqs on the simulator",
        f"study {study.pk} trial 2: max_num_seqs on the simulator",
        f"study {study.pk} ended: back to chat v1",
    ]
    wait_until(
        lambda: EngineNode.objects.filter(applied_version=fleet["version"], reported_status="online").exists(),
        60,
        "the node back on v1",
    )


def test_a_cancelled_study_cancels_its_replay_and_starts_no_further_trial(fleet, sre):
    study = study_create(
        actor=sre,
        pool=fleet["pool"],
        base_version=fleet["version"],
        log=fleet["log"],
        space=[{"path": "batch.max_size", "type": "int", "low": 4, "high": 16}],
        objective="max_throughput",
        replay={"qps": 5, "duration_s": 60},
        budget=5,
        reason="cancel me",
    )
    wait_until(lambda: ReplayRun.objects.filter(status="running").exists(), 60, "the first trial's replay running")
    study_cancel(actor=sre, study=TuningStudy.objects.get(pk=study.pk), reason="wrong log")
    study = finished(study.pk, 30)
    assert study.status == "cancelled"
    assert list(study.trials.values_list("state", flat=True)) == ["cancelled"]
    assert ReplayRun.objects.get().status == "cancelled"
    assert Pool.objects.get(pk=fleet["pool"].pk).desired_version == fleet["version"]


def test_a_qps_ladder_stops_at_the_first_step_that_misses_the_slo(fleet, sre):
    study = study_create(
        actor=sre,
        pool=fleet["pool"],
        base_version=fleet["version"],
        log=fleet["log"],
        space=[{"path": "engine.max_num_seqs", "type": "choice", "choices": [2]}],
        objective="max_qps",
        replay={"qps_ladder": [4, 60, 80], "duration_s": 2, "arrival": "uniform"},
        constraints={"p99_max_s": 1.0, "error_rate_max": 0.005},
        budget=1,
        reason="sustained QPS",
    )
    study = finished(study.pk, 120)
    assert study.status == "succeeded", study.error
    trial = study.trials.get()
    # Two sequences at a time keep up with 4 QPS, not with 60: the 80 QPS step is never run.
    assert [step["qps"] for step in trial.steps] == [4, 60]
    assert trial.steps[0]["violations"] == [] and trial.steps[1]["violations"]
    assert trial.value == 4 and trial.is_feasible and trial.violations == []
    # The trial's figures are the 4 QPS step's; both replays are recorded in its steps.
    assert trial.replay_run_id == trial.steps[0]["run"] and trial.measured["p99_s"] == trial.steps[0]["p99_s"]
    assert sorted(ReplayRun.objects.values_list("pk", flat=True)) == sorted(s["run"] for s in trial.steps)


def test_a_pooled_study_scores_the_p99_of_its_repeats_requests_together(fleet, sre):
    study = study_create(
        actor=sre,
        pool=fleet["pool"],
        base_version=fleet["version"],
        log=fleet["log"],
        space=[{"path": "engine.max_num_seqs", "type": "choice", "choices": [4]}],
        objective="min_p99",
        replay={"qps": 20, "duration_s": 3, "arrival": "poisson", "repeats": 2, "repeats_p99": "pooled"},
        constraints={"p99_max_s": 30, "error_rate_max": 0.5},
        budget=1,
        sampler="grid",
        seed=5,
        reason="pooled P99 on the simulator",
    )
    study = finished(study.pk, 180)
    assert study.status == "succeeded", study.error
    (trial,) = study.trials.all()
    (step,) = trial.steps
    runs = [ReplayRun.objects.get(pk=r["run"]) for r in step["repeats"]]
    assert [r.seed for r in runs] == [5, 6]
    # Recomputed here from the stored requests: every success of both replays, sorted, at nearest rank ceil(0.99 n).
    latencies = sorted(
        value
        for run in runs
        for value in run.requests.filter(ok=True).exclude(e2e_s=None).values_list("e2e_s", flat=True)
    )
    pooled = latencies[math.ceil(0.99 * len(latencies)) - 1]
    assert 80 <= len(latencies) <= trial.measured["requests"]
    # Stored figures keep 6 decimals (controlplane/replays/figures.py DIGITS).
    assert trial.value == trial.measured["p99_s"] == pytest.approx(pooled, abs=1e-6)
    # The repeats keep their own P99s; the pooled one lies between them.
    own = [r["p99_s"] for r in step["repeats"]]
    assert min(own) <= trial.value <= max(own)
