"""Impact records against hostile input: filter values that are not what they claim, and text written by users
(reasons, string field values) reaching the record pages and the field page's Plotly chart."""

import json
import re

import pytest
from django.test import Client

from controlplane.impact.models import ImpactRecord
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.factories import pools

pytestmark = pytest.mark.django_db

SCRIPT = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@pytest.fixture
def hostile(sre):
    """Two publishes whose reason and strict pattern are markup meant to run in a reader's browser."""
    staging, _ = pools(sre)
    template = template_create(actor=sre, name="chat")
    v1 = template_version_create(
        actor=sre, template=template, document={"inference_params": {"max_tokens": {"whitelist": []}}}, base_number=None
    )
    v2 = template_version_create(
        actor=sre,
        template=template,
        document={
            "inference_params": {
                "max_tokens": {"whitelist": []},
                "temperature": {"strict_patterns": ["x</script><script>alert\\(1\\)</script>"]},
            }
        },
        base_number=1,
    )
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    pool_publish(actor=sre, pool=staging, version=v2, reason=SCRIPT)
    return ImpactRecord.objects.get(reason=SCRIPT)


def page(user, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_markup_in_reasons_and_values_is_text_on_every_page(users, hostile):
    for url in (
        "/impact/",
        f"/impact/{hostile.pk}/",
        "/params/fields/temperature.strict_patterns/?pool=staging",
    ):
        html = page(users["agent"], url)
        assert "<script>window.pwned" not in html and "<img src=x" not in html, url
        assert "<script>alert" not in html, url
    html = page(users["agent"], "/params/fields/temperature.strict_patterns/?pool=staging")
    data = re.search(r'<script id="field-chart-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    chart = json.loads(data)  # the embedded JSON stays one script element whose values are the original text
    assert SCRIPT[:70] in chart["steps"]["text"][-2]
    assert any("<script>alert" in str(y) for y in chart["steps"]["y"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"field": "batch.max_size\x00"}, "field"),
        ({"field": "batch.max_size' OR '1'='1"}, "field"),
        ({"field": "../../etc/passwd"}, "field"),
        ({"kind": "publish\x00"}, "kind"),
        ({"since": "2026-12-01T00:00:00" + "9" * 10_000}, "since"),
        ({"until": "'; DROP TABLE impact_impactrecord; --"}, "until"),
    ],
)
def test_filters_that_cannot_match_are_400s_naming_the_filter(api_for, hostile, params, field):
    response = api_for("oncall").get("/api/v1/impact-records/", params)
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{field}: ")
    assert len(response.json()["error"]) < 300  # the hostile value is not echoed back whole
    assert ImpactRecord.objects.count() == 2


def test_a_pool_filter_with_sql_matches_nothing(api_for, hostile):
    response = api_for("oncall").get("/api/v1/impact-records/", {"pool": "staging' OR '1'='1"})
    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize("role", ["agent", "oncall", "sre", "admin"])
def test_no_role_writes_or_deletes_records_through_the_api(api_for, hostile, role):
    api = api_for(role)
    assert api.post("/api/v1/impact-records/", {"kind": "publish"}, format="json").status_code == 405
    assert api.patch(f"/api/v1/impact-records/{hostile.pk}/", {"outcome": "improved"}, format="json").status_code == 405
    assert api.delete(f"/api/v1/impact-records/{hostile.pk}/").status_code == 405
    hostile.refresh_from_db()
    assert hostile.outcome == "" and ImpactRecord.objects.count() == 2


def test_a_field_page_for_markup_is_a_404_that_does_not_reflect_it(users):
    client = Client()
    client.force_login(users["agent"])
    response = client.get("/params/fields/%3Cscript%3Ealert(1)%3C%2Fscript%3E/")
    assert response.status_code == 404
    assert b"<script>alert(1)" not in response.content
