"""Starting and cancelling studies: who may, which pools, which fields; every refusal names the field."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, DomainError, Forbidden, InvalidField
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.services import study_cancel, study_create
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db


def refusal(actor, world, **changes) -> dict:
    with pytest.raises(DomainError) as caught:
        study_create(actor=actor, **study_args(world, **changes))
    assert not TuningStudy.objects.exists()
    return caught.value.detail[0] if caught.value.detail else {"message": caught.value.message}


def test_an_sre_starts_a_study_with_the_slo_as_constraints_and_it_is_audited(tuning_world, sre):
    study = study_create(actor=sre, **study_args(tuning_world))
    assert study.status == "queued" and study.budget == 3 and study.sampler == "tpe"
    assert study.constraints == {"p99_max_s": 1.8, "error_rate_max": 0.005}
    assert study.space == [
        {"path": "engine.max_num_seqs", "type": "int", "apply": "cold", "low": 8, "high": 32, "step": 8}
    ]
    assert study.cold_fields == ["engine.max_num_seqs"]
    assert study.pool_version_before == tuning_world["v1"]
    assert study.replay_spec == {
        "selection": "all",
        "arrival": "poisson",
        "duration_s": 5,
        "repeats": 1,
        "repeats_p99": "median",
        "qps": 20.0,
    }
    entry = AuditEntry.objects.get(action="tuning.create")
    assert entry.reason == "find max_num_seqs for the festival" and entry.after["pool"] == "staging"


def test_a_study_may_repeat_each_trials_replay(tuning_world, sre):
    study = study_create(actor=sre, **study_args(tuning_world, replay={"qps": 20, "duration_s": 5, "repeats": 3}))
    assert study.replay_spec["repeats"] == 3
    assert AuditEntry.objects.get(action="tuning.create").after["replay"]["repeats"] == 3


def test_a_study_may_take_its_p99_over_the_repeats_requests_pooled(tuning_world, sre):
    replay = {"qps": 20, "duration_s": 5, "repeats": 3, "repeats_p99": "pooled"}
    study = study_create(actor=sre, **study_args(tuning_world, replay=replay))
    assert study.replay_spec["repeats_p99"] == "pooled"


@pytest.mark.parametrize("role", ["admin", "sre"])
def test_a_production_pool_is_refused_even_for_an_admin(tuning_world, users, role):
    detail = refusal(users[role], tuning_world, pool=tuning_world["production"])
    assert detail["path"] == "pool" and "production pool" in detail["message"]


@pytest.mark.parametrize("role", ["agent", "oncall"])
def test_only_sres_and_admins_run_a_study(tuning_world, users, role):
    with pytest.raises(Forbidden):
        study_create(actor=users[role], **study_args(tuning_world))
    assert not TuningStudy.objects.exists()


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"objective": "fastest"}, "objective", "min_p99, max_throughput, max_qps"),
        ({"sampler": "bayes"}, "sampler", "tpe, grid, random"),
        ({"budget": 0}, "budget", "between 1 and"),
        ({"budget": 5000}, "budget", "between 1 and"),
        ({"reason": "  "}, "reason", "required"),
        ({"replay": {"duration_s": 5}}, "replay.qps", "required"),
        ({"replay": {"qps": 20, "duration_s": 0}}, "replay.duration_s", "between 1"),
        ({"replay": {"qps": 9999}}, "replay.qps", "between 0.01"),
        ({"replay": {"qps": 20, "speed": 2}}, "replay.speed", "unknown key"),
        ({"replay": {"qps": 20, "repeats": 0}}, "replay.repeats", "between 1 and 10"),
        ({"replay": {"qps": 20, "repeats": 11}}, "replay.repeats", "between 1 and 10"),
        ({"replay": {"qps": 20, "repeats": 2.5}}, "replay.repeats", "whole number"),
        ({"replay": {"qps": 20, "repeats": True}}, "replay.repeats", "whole number"),
        ({"replay": {"qps": 20, "repeats": 3, "repeats_p99": "mean"}}, "replay.repeats_p99", "median, pooled"),
        # Repeat r replays with seed + r: the largest seeds would leave the replay's range.
        ({"seed": 2**62}, "seed", "between"),
        ({"objective": "max_qps", "replay": {"qps": 20}}, "replay.qps_ladder", "ladder of 2"),
        ({"objective": "max_qps", "replay": {"qps_ladder": [40, 20]}}, "replay.qps_ladder", "must go up"),
        ({"constraints": {"p99_max_s": 0}}, "constraints.p99_max_s", "above 0"),
        ({"constraints": {"p95_max_s": 1}}, "constraints.p95_max_s", "unknown key"),
        ({"space": [{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 9000}]}, "space[0].high", "4096"),
        # Cross-field rules of the schema, checked at each end of the range with the base version.
        ({"space": [{"path": "batch.min_size", "type": "int", "low": 2, "high": 64}]}, "space[0]", "batch.min_size"),
    ],
)
def test_a_bad_study_is_refused_naming_the_field_and_nothing_is_stored(tuning_world, sre, changes, path, words):
    detail = refusal(sre, tuning_world, **changes)
    assert detail["path"] == path and words in detail["message"], detail


def test_one_study_at_a_time_per_pool_and_a_pool_without_nodes_is_refused(tuning_world, sre):
    study_create(actor=sre, **study_args(tuning_world))
    with pytest.raises(Conflict, match="already tuning staging"):
        study_create(actor=sre, **study_args(tuning_world))
    tuning_world["staging"].nodes.all().delete()
    TuningStudy.objects.update(status="cancelled")
    with pytest.raises(DomainError, match="no nodes"):
        study_create(actor=sre, **study_args(tuning_world))


def test_a_queued_study_is_cancelled_at_once_and_only_once(tuning_world, sre, agent):
    study = study_create(actor=sre, **study_args(tuning_world))
    with pytest.raises(Forbidden):
        study_cancel(actor=agent, study=study, reason="mine")
    study = study_cancel(actor=sre, study=study, reason="wrong log")
    assert study.status == "cancelled" and study.finished_at and study.cancelled_by == sre
    with pytest.raises(Conflict):
        study_cancel(actor=sre, study=study, reason="again")
    assert AuditEntry.objects.get(action="tuning.cancel").reason == "wrong log"


def test_a_running_study_is_asked_to_stop_and_each_refusal_says_why(tuning_world, sre):
    study = study_create(actor=sre, **study_args(tuning_world))
    TuningStudy.objects.filter(pk=study.pk).update(status="running")
    with pytest.raises(InvalidField, match="reason"):
        study_cancel(actor=sre, study=study, reason="  ")
    assert TuningStudy.objects.get(pk=study.pk).status == "running", "a refused cancel changes nothing"
    study = study_cancel(actor=sre, study=study, reason="wrong log")
    assert study.status == "cancelling" and study.finished_at is None and study.cancelled_by == sre
    assert study.is_active
    with pytest.raises(Conflict, match=rf"^status: study {study.pk} is already being cancelled$"):
        study_cancel(actor=sre, study=study, reason="again")
    TuningStudy.objects.filter(pk=study.pk).update(status="failed")
    with pytest.raises(Conflict, match=rf"^status: study {study.pk} is already failed$"):
        study_cancel(actor=sre, study=study, reason="again")
    entry = AuditEntry.objects.get(action="tuning.cancel")
    assert (entry.before, entry.after) == ({"status": "running"}, {"status": "cancelling"})
