"""The tuning API: start a study (201, its shape), refusals naming the field, one study with its trials, cancel."""

import pytest
from django.urls import reverse

from controlplane.tuning.models import TuningStudy

pytestmark = pytest.mark.django_db


def body(**changes) -> dict:
    data = {
        "pool": "staging",
        "template": "chat",
        "base_version": 2,
        "log": "festival-log",
        "space": [
            {"path": "engine.max_num_seqs", "type": "int", "low": 16, "high": 128, "step": 16},
            {"path": "engine.max_num_batched_tokens", "type": "int", "low": 2048, "high": 16384, "step": 2048},
        ],
        "objective": "max_qps",
        "replay": {"qps_ladder": [30, 40, 50, 60], "duration_s": 20},
        "budget": 12,
        "sampler": "tpe",
        "seed": 7,
        "reason": "the vLLM auto-tune pair",
    }
    data.update(changes)
    return data


def test_an_sre_starts_a_study_and_reads_it_back(tuning_world, api_for):
    client = api_for("sre")
    response = client.post(reverse("api:tuning-study-list"), body(), format="json")
    assert response.status_code == 201, response.content
    study = response.json()
    assert study["status"] == "queued" and study["pool"] == "staging" and study["trials"] == []
    assert study["base_version"] == {"template": "chat", "number": 2, "id": tuning_world["v2"].pk}
    assert study["cold_fields"] == ["engine.max_num_seqs", "engine.max_num_batched_tokens"]
    assert study["replay"] == {
        "selection": "all",
        "arrival": "poisson",
        "duration_s": 20,
        "repeats": 1,
        "repeats_p99": "median",
        "qps_ladder": [30, 40, 50, 60],
    }
    assert study["constraints"] == {"p99_max_s": 1.8, "error_rate_max": 0.005}
    assert study["best_version"] is None and study["pool_version_before"]["number"] == 1
    listed = client.get(reverse("api:tuning-study-list"), {"pool": "staging"}).json()
    assert [s["id"] for s in listed["results"]] == [study["id"]]
    detail = api_for("agent").get(reverse("api:tuning-study-detail", args=[study["id"]])).json()
    assert detail["objective"] == "max_qps" and detail["sampler"] == "tpe"
    cancelled = client.post(reverse("api:tuning-study-cancel", args=[study["id"]]), {"reason": "x"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = client.post(reverse("api:tuning-study-cancel", args=[study["id"]]), {"reason": "x"}, format="json")
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"pool": "nowhere"}, "pool"),
        ({"template": "chat", "base_version": 9}, "base_version"),
        ({"log": "missing"}, "log"),
        ({"budget": "many"}, "budget"),
        ({"space": [{"path": "engine.max_num_seqs", "type": "int", "low": 16}]}, "space[0].high"),
        ({"replay": {"qps_ladder": [30], "duration_s": 20}}, "replay.qps_ladder"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_a_bad_request_names_its_field_and_stores_nothing(tuning_world, api_for, changes, path):
    response = api_for("admin").post(reverse("api:tuning-study-list"), body(**changes), format="json")
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    # Shape errors come per field from the serializer, rule errors as a list of {path, message}.
    paths = list(detail) if isinstance(detail, dict) else [d["path"] for d in detail]
    assert path in paths, response.json()
    assert not TuningStudy.objects.exists()
