"""A tuning study never touches production: a production pool is refused for every role (admins too, and there is
no override field), a pool that becomes production while a study runs gets no further candidate, only SREs and
admins start or cancel one, and a hostile search space is refused naming its field with nothing stored."""

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import InvalidField
from controlplane.nodes.models import Pool
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.runner import study_run
from controlplane.tuning.services import study_create
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db


def body(**changes) -> dict:
    data = {
        "pool": "staging",
        "template": "chat",
        "base_version": 2,
        "log": "festival-log",
        "space": [{"path": "batch.max_size", "type": "int", "low": 4, "high": 16}],
        "objective": "min_p99",
        "replay": {"qps": 5, "duration_s": 5},
        "budget": 3,
        "reason": "batch size",
    }
    data.update(changes)
    return data


def post(client, data):
    return client.post(reverse("api:tuning-study-list"), data, format="json")


@pytest.mark.parametrize("role", ["admin", "sre"])
def test_an_admin_cannot_tune_a_production_pool_through_the_api_nor_override_it(tuning_world, api_for, role):
    response = post(api_for(role), body(pool="prod-main"))
    assert response.status_code == 400
    assert response.json()["detail"][0]["path"] == "pool" and "production" in response.json()["detail"][0]["message"]
    response = post(api_for(role), body(pool="prod-main", production_override_reason="I know"))
    assert response.status_code == 400 and "production_override_reason" in response.content.decode()
    assert not TuningStudy.objects.exists() and not AuditEntry.objects.filter(action="tuning.create").exists()


@pytest.mark.parametrize("role", ["agent", "oncall", None])
def test_only_operators_start_a_study(tuning_world, api_for, role):
    response = post(api_for(role), body())
    assert response.status_code == (401 if role is None else 403)
    assert not TuningStudy.objects.exists()


def test_a_pool_turned_production_during_a_study_gets_no_candidate(tuning_world, sre, settings):
    settings.TUNING_APPLY_TIMEOUT_S = 1
    study = study_create(actor=sre, **study_args(tuning_world, budget=2))
    publishes = AuditEntry.objects.filter(action="pool.publish").count()
    Pool.objects.filter(pk=tuning_world["staging"].pk).update(is_production=True)
    study_run(study.pk)
    study.refresh_from_db()
    assert study.status == "failed"
    assert all("now a production pool" in t.error for t in study.trials.all())
    assert AuditEntry.objects.filter(action="pool.publish").count() == publishes
    assert Pool.objects.get(pk=tuning_world["staging"].pk).desired_version == tuning_world["v1"]


@pytest.mark.parametrize(
    ("space", "path"),
    [
        ([{"path": "engine.max_num_seqs\x00", "type": "int", "low": 1, "high": 2}], "space[0].path"),
        ([{"path": "../../etc/passwd", "type": "int", "low": 1, "high": 2}], "space[0].path"),
        ([{"path": "engine.extra_args", "type": "choice", "choices": ["--trust-remote-code"]}], "space[0].path"),
        ([{"path": "engine.model", "type": "choice", "choices": ["evil/model"]}], "space[0].path"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 1, "high": 10**30}], "space[0].high"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 1, "high": 4096, "step": 1}] * 7, "space"),
        ([{"path": "engine.quantization", "type": "choice", "choices": ["fp8"] * 40}], "space[0].choices"),
        ({"path": "engine.max_num_seqs"}, "space"),
        # A choice among numbers is searched by its index among the sorted values: every value must be one the field
        # takes, and one value listed twice in two spellings (16 and 16.0) would be two indices for one candidate.
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [16, 16.0]}], "space[0].choices"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 4.5]}], "space[0].choices[1]"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, True]}], "space[0].choices[1]"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, "8"]}], "space[0].choices[1]"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 0]}], "space[0].choices[1]"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 10**30]}], "space[0].choices[1]"),
        ([{"path": "engine.gpu_memory_utilization", "type": "choice", "choices": [0.9, 0.90]}], "space[0].choices"),
        ([{"path": "engine.max_num_seqs", "type": "choice", "choices": list(range(1, 34))}], "space[0].choices"),
    ],
)
def test_a_hostile_space_is_refused_naming_its_field(tuning_world, api_for, space, path):
    response = post(api_for("admin"), body(space=space))
    assert response.status_code == 400, response.content[:300]
    assert response.json()["detail"][0]["path"] == path
    assert not TuningStudy.objects.exists()


def test_a_grid_too_large_to_run_is_refused(tuning_world, api_for):
    space = [
        {"path": "engine.max_num_seqs", "type": "int", "low": 1, "high": 4096},
        {"path": "engine.max_num_batched_tokens", "type": "int", "low": 1, "high": 4096},
    ]
    response = post(api_for("sre"), body(space=space, sampler="grid"))
    assert response.status_code == 400 and response.json()["detail"][0]["path"] == "space"
    assert "points" in response.json()["detail"][0]["message"]


@pytest.mark.parametrize(
    ("replay", "words"),
    [
        # Repeats multiply every trial's replays (and every ladder step's): a huge count would hold the pool for ever.
        ({"qps": 5, "duration_s": 5, "repeats": 10**9}, "between 1 and 10"),
        ({"qps": 5, "duration_s": 5, "repeats": -1}, "between 1 and 10"),
        ({"qps": 5, "duration_s": 5, "repeats": "3"}, "whole number"),
        ({"qps": 5, "duration_s": 5, "repeats": [3]}, "whole number"),
        ({"qps": 5, "duration_s": 5, "repeats": 1e308}, "whole number"),
    ],
)
def test_a_hostile_repeat_count_is_refused_naming_it(tuning_world, api_for, replay, words):
    response = post(api_for("sre"), body(replay=replay))
    assert response.status_code == 400, response.content[:300]
    detail = response.json()["detail"][0]
    assert detail["path"] == "replay.repeats" and words in detail["message"]
    assert not TuningStudy.objects.exists() and not AuditEntry.objects.filter(action="tuning.create").exists()


@pytest.mark.parametrize("value", ["MEDIAN", "pooled; drop table", None, ["pooled"], {"pooled": 1}, 1, True])
def test_an_unknown_way_to_take_the_repeats_p99_is_refused_naming_it(tuning_world, api_for, value):
    response = post(api_for("sre"), body(replay={"qps": 5, "duration_s": 5, "repeats": 3, "repeats_p99": value}))
    assert response.status_code == 400, response.content[:300]
    detail = response.json()["detail"][0]
    assert detail["path"] == "replay.repeats_p99" and "median, pooled" in detail["message"]
    assert not TuningStudy.objects.exists() and not AuditEntry.objects.filter(action="tuning.create").exists()


def test_a_seed_whose_repeats_would_leave_the_replay_seed_range_is_refused(tuning_world, api_for):
    response = post(api_for("sre"), body(seed=2**62, replay={"qps": 5, "duration_s": 5, "repeats": 10}))
    assert response.status_code == 400 and response.json()["detail"][0]["path"] == "seed"
    assert not TuningStudy.objects.exists()


def test_an_ordered_choice_is_stored_as_the_fields_own_values_and_trials_record_them(tuning_world, api_for):
    """The sampler works on indices; the study, its API and its trials keep the field's values (16, not 3 or 16.0)."""
    space = [{"path": "engine.max_num_seqs", "type": "choice", "choices": [16.0, 2, 8.0, 4]}]
    response = post(api_for("sre"), body(space=space, sampler="grid", budget=1))
    assert response.status_code == 201, response.content[:300]
    assert response.json()["space"][0]["choices"] == [16, 2, 8, 4]
    assert all(type(v) is int for v in TuningStudy.objects.get().space[0]["choices"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_choice_that_is_not_a_finite_number_is_refused_before_it_is_ordered(tuning_world, sre, value):
    """JSON from the API has no NaN, but a service caller could pass one: it has no place among sorted values."""
    space = [{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, value]}]
    with pytest.raises(InvalidField) as refused:
        study_create(actor=sre, **study_args(tuning_world, space=space))
    assert refused.value.detail == [{"path": "space[0].choices[1]", "message": f"must be a number, got {value!r}"}]
    assert not TuningStudy.objects.exists()
