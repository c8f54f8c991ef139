"""A parameter field's page in Chromium: the step line of its value over the pool's P99 and throughput, the table
of changes with their outcomes, and the way there from a record."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.browser.sessions import open_signed_in
from tests.impact.test_services import pool_rows

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def record_history(settings) -> None:
    """batch.max_size 8 → 16 → 32 on pool `tuning`, 4 and 2 minutes ago, each measured over a minute of pool samples:
    the first raised P99 (worsened), the second brought it down (improved). Off this thread, as Playwright runs an
    event loop here."""

    def run():
        try:
            from controlplane.accounts.models import User
            from controlplane.impact.services import impact_record_change, impact_record_measure
            from controlplane.nodes.services.pools import pool_create
            from controlplane.params.services.templates import template_create, template_version_create

            sre = User.objects.get(username="sre")
            tuning = pool_create(actor=sre, name="tuning", is_production=False)
            template = template_create(actor=sre, name="batching")
            versions = [
                template_version_create(
                    actor=sre,
                    template=template,
                    document={"inference_params": {"batch": {"max_size": size}}},
                    base_number=i or None,
                )
                for i, size in enumerate((8, 16, 32))
            ]
            now = timezone.now().replace(microsecond=0)
            start = now - timedelta(seconds=300)
            pool_rows("tuning", start, 60, p99=0.6, qps=20)
            pool_rows("tuning", start + timedelta(seconds=60), 120, p99=1.4, qps=20)
            pool_rows("tuning", start + timedelta(seconds=180), 120, p99=0.5, qps=20)
            for at, before, after, reason in (
                (start + timedelta(seconds=60), versions[0], versions[1], "bigger batches for the evening peak"),
                (start + timedelta(seconds=180), versions[1], versions[2], "32 with a shorter timeout"),
            ):
                record = impact_record_change(
                    kind="publish",
                    pool=tuning,
                    actor=sre,
                    reason=reason,
                    version_before=before,
                    version_after=after,
                    changed_at=at,
                )
                impact_record_measure(record_id=record.pk, now=now)
        finally:
            connection.close()

    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_SETTLE_S = 0
    settings.IMPACT_MIN_SAMPLES = 30
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_field_page_charts_the_value_against_p99_and_lists_outcomes(seeded, server_url, new_page, shot, settings):
    record_history(settings)
    page = new_page()
    open_signed_in(page, server_url, "agent", "/impact/?field=batch.max_size&template=batching")
    rows = page.locator("[data-testid=impact-records] tbody tr")
    assert rows.count() == 2
    assert [
        o.strip() for o in page.locator("[data-testid=impact-records] [data-field=outcome]").all_text_contents()
    ] == [
        "Improved",
        "Worsened",
    ]
    page.click("[data-testid=impact-records] tbody tr:last-child a[href^='/impact/']")
    assert "P99 latency" in page.text_content("[data-testid=figures]")
    assert "after/before ratio 1.00" in page.text_content("[data-testid=load]")
    shot(page, "impact-record")
    page.click("[data-testid=changes] a:has-text('batch.max_size')")
    page.wait_for_url(f"{server_url}/params/fields/batch.max_size/?pool=tuning")
    page.wait_for_function("document.querySelector('#field-chart .main-svg') !== null")
    traces = page.evaluate(
        "document.getElementById('field-chart').data.map(t => [t.name, t.y.filter(v => v !== null).length])"
    )
    assert [name for name, _ in traces] == ["batch.max_size", "P99 (s)", "throughput (QPS)"]
    steps = page.evaluate("document.getElementById('field-chart').data[0].y")
    assert steps == [8, 16, 32, 32]
    assert all(points > 100 for _, points in traces[1:])
    table = page.text_content("[data-testid=field-changes]")
    assert "16 → 32" in table and "8 → 16" in table and "bigger batches for the evening peak" in table
    shot(page, "impact-field-page")


HOSTILE_REASON = '<a href="javascript:window.pwned=1">click</a><img src=x onerror="window.pwned=2">'


def test_markup_in_reasons_and_values_stays_text_in_the_chart(seeded, server_url, new_page, shot):
    """The attack of tests/security/test_impact_attacks.py, in Chromium: Plotly renders a subset of HTML in hover
    text and category labels, so a reason or a pattern list reaches it as text."""

    def run():
        try:
            from controlplane.accounts.models import User
            from controlplane.nodes.services.pools import pool_create, pool_publish
            from controlplane.params.services.templates import template_create, template_version_create

            sre = User.objects.get(username="sre")
            pool = pool_create(actor=sre, name="hostile", is_production=False)
            template = template_create(actor=sre, name="hostile")
            for i, patterns in enumerate((["plain"], ['<a href="javascript:window.pwned=3">x</a>'])):
                version = template_version_create(
                    actor=sre,
                    template=template,
                    document={"inference_params": {"temperature": {"strict_patterns": patterns}}},
                    base_number=i or None,
                )
                pool_publish(actor=sre, pool=pool, version=version, reason=HOSTILE_REASON)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    page = new_page()
    open_signed_in(page, server_url, "agent", "/params/fields/temperature.strict_patterns/?pool=hostile")
    page.wait_for_function("document.querySelector('#field-chart .main-svg') !== null")
    page.evaluate("Plotly.Fx.hover('field-chart', [{curveNumber: 0, pointNumber: 1}])")
    page.wait_for_selector("#field-chart .hoverlayer .hovertext")
    assert page.evaluate("window.pwned") is None
    assert page.locator("#field-chart a").count() == 0 and page.locator("#field-chart img").count() == 0
    assert 'href="javascript' in page.inner_text("#field-chart")  # shown, as text
    assert page.locator("[data-testid=field-changes] a[href^=javascript]").count() == 0
    shot(page, "impact-field-page-hostile")
