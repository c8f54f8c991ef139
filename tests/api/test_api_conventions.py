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


@pytest.mark.parametrize("url", ["api:audit-list", "api:audit-export"])
def test_time_filters_with_offsets_postgres_refuses_are_taken_in_utc(world, api_for, url):
    """Python reads `-21:09` as an offset; Postgres refuses past 15:59: the list was a 500, the CSV hung."""
    response = api_for("oncall").get(reverse(url), {"until": "0733-07-31T22:37:35-21:09"})
    assert response.status_code == 200
    if url == "api:audit-export":
        assert b"".join(response.streaming_content).decode().splitlines()[1:] == []
    out_of_range = api_for("oncall").get(reverse(url), {"since": "0001-01-01T00:00:00+01:00"})
    assert out_of_range.status_code == 400
    assert out_of_range.json()["error"] == "since: is out of range"


def test_metric_history_bounds_with_such_offsets_are_taken_in_utc(world, api_for):
    url = reverse("api:metric-history", args=["pool", "staging"])
    bounds = {"metric": "qps", "since": "2026-12-01T00:00:00-21:09", "until": "2026-12-01T01:00:00-21:09"}
    response = api_for("oncall").get(url, bounds)
    assert response.status_code == 200
    assert response.json()["until"] - response.json()["since"] == 3600
    for since in ("0001-01-01T00:00:00+01:00", "2020-13-01T00:00:00"):
        assert api_for("oncall").get(url, {"metric": "qps", "since": since}).status_code == 400
