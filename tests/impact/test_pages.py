"""Impact pages: the record list and its filters, a record's figures and verdicts, a parameter field's history."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.accounts.roles import Role
from controlplane.impact.models import ImpactRecord
from controlplane.impact.services import impact_record_measure
from controlplane.nodes.services.pools import pool_publish
from tests.factories import pools, template_with_versions
from tests.impact.test_services import pool_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def measured(sre, agent, settings):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_MIN_SAMPLES = 30
    staging, _ = pools(sre)
    v1, v2 = template_with_versions(agent, temperatures=(0.3, 0.2))[1]
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    pool_publish(actor=sre, pool=staging, version=v2, reason="cooler <b>strict</b> tier")
    record = ImpactRecord.objects.get(reason__startswith="cooler")
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=120)
    ImpactRecord.objects.filter(pk=record.pk).update(changed_at=at)
    pool_rows("staging", at - timedelta(seconds=60), 60, p99=0.5, qps=20)
    pool_rows("staging", at, 60, p99=1.5, qps=20)
    return impact_record_measure(record_id=record.pk)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", Role.values)
def test_every_role_reads_the_record_pages(users, measured, role):
    client = client_for(users[role])
    for url in ("/impact/", f"/impact/{measured.pk}/", "/params/fields/temperature.strict/"):
        assert client.get(url).status_code == 200, url


def test_anonymous_is_sent_to_login(measured):
    for url in ("/impact/", f"/impact/{measured.pk}/", "/params/fields/temperature.strict/"):
        assert Client().get(url)["Location"].startswith("/login/")


def test_record_page_shows_verdicts_load_and_diff(users, measured):
    html = client_for(users["agent"]).get(f"/impact/{measured.pk}/").content.decode()
    assert "Worsened" in html and "cooler &lt;b&gt;strict&lt;/b&gt; tier" in html
    assert 'data-figure="latency_p99_s"' in html and "verdict-worsened" in html
    assert "after/before ratio 1.00" in html
    assert 'href="/params/fields/temperature.strict/?pool=staging"' in html


def test_list_filters_and_a_bad_filter_names_the_field(users, measured):
    client = client_for(users["oncall"])
    html = client.get("/impact/", {"outcome": "worsened"}).content.decode()
    assert f'data-record="{measured.pk}"' in html and html.count("data-record=") == 1
    html = client.get("/impact/", {"field": "no.such"}).content.decode()
    assert "field: no parameter field named &#x27;no.such&#x27;" in html


def test_field_page_lists_changes_and_charts_them(users, measured):
    html = client_for(users["agent"]).get("/params/fields/temperature.strict/").content.decode()
    assert "0.3 → 0.2" in html and "field-chart-data" in html
    assert html.index("cooler") < html.index(">first<")  # newest first
    assert client_for(users["agent"]).get("/params/fields/not.a.field/").status_code == 404


def test_version_page_links_field_names(users, measured):
    html = client_for(users["agent"]).get("/templates/chat/v1/").content.decode()
    assert 'href="/params/fields/batch.max_size/"' in html


def test_pool_page_links_its_records(users, measured):
    html = client_for(users["oncall"]).get("/pools/staging/").content.decode()
    assert 'href="/impact/?pool=staging"' in html
