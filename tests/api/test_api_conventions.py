"""Conventions of the API that the fuzzer found broken once: each answer in the documented shape and status."""

import pytest
from django.urls import reverse

from controlplane.metrics.models import MetricSample

pytestmark = pytest.mark.django_db


def test_an_unknown_api_path_is_a_json_404_whatever_the_method(api_for):
    client = api_for("sre")
    for method in ("get", "post", "put", "delete"):
        response = getattr(client, method)("/api/v1/templates/chat/versions/not-a-number/explain/", {}, format="json")
        assert response.status_code == 404, method
        assert response["Content-Type"] == "application/json"
        assert response.json() == {
            "error": "no API route /api/v1/templates/chat/versions/not-a-number/explain/",
            "detail": None,
        }


def test_a_missing_trailing_slash_is_named(api_for):
    response = api_for("sre").post("/api/v1/pools", {"name": "x"}, format="json")
    assert response.status_code == 404
    assert (
        response.json()["error"]
        == "no API route /api/v1/pools; did you mean /api/v1/pools/ (every API path ends with a slash)?"
    )


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        ({"base_version": 1, "scenarios": ["legal"], "comment": 0}, "comment", "must be a string"),
        ({"base_version": "1", "scenarios": ["legal"]}, "base_version", "must be an integer"),
        ({"base_version": True, "scenarios": ["legal"]}, "base_version", "must be an integer"),
    ],
)
def test_json_values_must_have_their_documented_type(world, api_for, body, field, problem):
    response = api_for("agent").post(reverse("api:whitelist-version-list", args=["legal"]), body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"] == {field: [problem]}


def test_form_bodies_still_convert_their_strings(world, api_for):
    body = {"base_version": "1", "scenarios": '["legal", "tax"]', "comment": "from a form"}
    response = api_for("agent").post(reverse("api:whitelist-version-list", args=["legal"]), body)
    assert response.status_code == 201, response.content
    assert response.json()["scenarios"] == ["legal", "tax"]


def test_a_document_must_be_an_object(world, api_for):
    body = {"base_version": 2, "document": ["inference_params"]}
    response = api_for("agent").post(reverse("api:template-version-list", args=["chat"]), body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"] == {"document": ["must be a JSON object"]}


@pytest.mark.parametrize(("url", "param"), [("api:pool-list", "is_production"), ("api:silence-list", "all")])
def test_a_malformed_boolean_filter_is_a_400_naming_it(world, api_for, url, param):
    response = api_for("sre").get(reverse(url), {param: "maybe"})
    assert response.status_code == 400
    assert response.json()["error"] == f"{param}: must be true or false, got 'maybe'"
    assert api_for("sre").get(reverse(url), {param: "true"}).status_code == 200
    assert api_for("sre").get(reverse(url), {param: ""}).status_code == 200


def test_empty_metric_history_bounds_count_as_not_given(world, api_for):
    assert MetricSample.Scope.POOL == "pool"
    url = reverse("api:metric-history", args=["pool", "staging"])
    response = api_for("oncall").get(url, {"metric": "qps", "since": "", "until": ""})
    assert response.status_code == 200
    assert response.json()["until"] - response.json()["since"] == 300
