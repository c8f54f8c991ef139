"""Comparing replay runs in Chromium: tick two finished runs, pick the baseline, read the verdict, the charts and
the figures side by side, and follow a figure to the requests behind it."""

import pytest

from controlplane.nodes.models import EngineNode, Pool
from controlplane.params.models import TemplateVersion
from controlplane.params.services.templates import template_version_create
from controlplane.replays.comparison_models import ReplayComparison
from tests.browser.sessions import open_signed_in
from tests.replays.factories import finished_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DEFAULTS = {
    "inference_params": {
        "max_tokens": {"default": 512, "whitelist": []},
        "temperature": {"strict": 0.7, "normal": 0.7, "creative": 0.7},
    }
}


def test_compare_two_runs_and_read_the_verdict(seeded, server_url, new_page, shot):
    from controlplane.accounts.models import User

    agent = User.objects.get(username="agent")
    tuned = TemplateVersion.objects.get(template__name="chat-default", number=1)
    defaults = template_version_create(
        actor=agent, template=tuned.template, document=DEFAULTS, base_number=tuned.template.latest_number
    )
    staging = Pool.objects.get(name="staging")
    EngineNode.objects.update_or_create(name="sim-1", defaults={"pool": staging, "backend": "simulator"})
    slow = finished_run(actor=agent, pool=staging, version=defaults, median_s=1.3, n=1500, seed=1, slow_intent="coupon")
    fast = finished_run(actor=agent, pool=staging, version=tuned, median_s=0.55, n=1500, seed=2)

    page = new_page()
    open_signed_in(page, server_url, "agent", "/replays/comparisons/")
    form = page.locator("[data-testid=compare-form]")
    form.locator(f'input[name=runs][value="{slow.pk}"]').check()
    form.locator(f'input[name=runs][value="{fast.pk}"]').check()
    form.locator(f'input[name=baseline][value="{slow.pk}"]').check()
    form.locator("input[name=label]").fill("report template vs defaults")
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{server_url}/replays/comparisons/*/")
    comparison = ReplayComparison.objects.get()
    assert page.url.endswith(f"/replays/comparisons/{comparison.pk}/")

    verdict = page.locator("[data-testid=verdict]").inner_text()
    assert f"Run {fast.pk} (chat-default v1) meets the P99 SLO, run {slow.pk} (chat-default v2) does not (" in verdict
    assert "beyond noise" in verdict
    assert page.locator("h1 [data-testid=simulated-label]").inner_text().lower() == "simulated"
    page.locator("#chart-cdf[data-drawn='1'] .main-svg").first.wait_for()
    page.locator("#chart-intents[data-drawn='1'] .main-svg").first.wait_for()
    # One CDF line per run, one bar group per run.
    assert page.locator("#chart-cdf .scatterlayer .trace").count() == 2
    assert page.locator("#chart-intents .barlayer .trace").count() == 2
    p99_row = page.locator('[data-testid=figures] tr[data-figure="latency.e2e_s.p99"]').inner_text()
    assert "beyond noise" in p99_row.lower()
    assert "max_tokens.default" in page.locator("[data-testid=version-diff]").inner_text()
    shot(page, "90-replay-comparison")

    # The baseline's P99 links to the requests at and above it.
    page.locator(f'[data-testid=slo-table] tr[data-run="{slow.pk}"] a').first.click()
    page.wait_for_url("**/figures/requests/?figure=latency.e2e_s.p99")
    assert page.locator("[data-testid=figure-requests] tbody tr").count() == 16  # ranks 1485..1500 of 1500 ok
    shot(page, "91-replay-figure-requests")

    # The finished run's own page carries its figures, the coupon questions slowest, and links to compare it.
    page.goto(f"{server_url}/replays/{slow.pk}/")
    intents = page.locator("[data-testid=replay-figures] [data-testid=run-intents] tbody tr")
    assert intents.first.get_attribute("data-intent") == "coupon"
    assert page.locator("[data-testid=replay-figures] [data-testid=simulated-label]").count() == 1
    page.locator("[data-testid=compare-link]").click()
    page.wait_for_url(f"**/replays/comparisons/?runs={slow.pk}")
    assert page.locator(f'input[name=runs][value="{slow.pk}"]').is_checked()
    page.goto(f"{server_url}/replays/{slow.pk}/")
    shot(page, "92-replay-run-figures")


def test_hostile_labels_stay_text_in_the_charts(seeded, server_url, new_page):
    from controlplane.accounts.models import User
    from controlplane.replays.comparison_services import replay_comparison_create
    from controlplane.replays.models import ReplayRequest, ReplayRun

    agent = User.objects.get(username="agent")
    version = TemplateVersion.objects.get(template__name="chat-default", number=1)
    staging = Pool.objects.get(name="staging")
    runs = [finished_run(actor=agent, pool=staging, version=version, n=200, seed=i) for i in (1, 2)]
    markup = '<a href="javascript:alert(1)">x</a><img src=x onerror="alert(2)">'
    ReplayRun.objects.filter(pk=runs[1].pk).update(label=markup)
    intent = '<a href="javascript:alert(3)">c</a>'  # intents are at most 64 characters
    ReplayRequest.objects.filter(run__in=runs, seq__lt=40).update(intent=intent)
    comparison = replay_comparison_create(actor=agent, run_ids=[r.pk for r in runs], resamples=100)

    page = new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_signed_in(page, server_url, "oncall", f"/replays/comparisons/{comparison.pk}/")
    page.locator("#chart-cdf[data-drawn='1'] .main-svg").first.wait_for()
    page.locator("#chart-intents[data-drawn='1'] .main-svg").first.wait_for()
    assert page.locator("#chart-cdf a, #chart-intents a, main img").count() == 0
    assert '<a href="javascript:alert(1)">' in page.locator("#chart-cdf .legend").text_content()
    assert intent in page.locator("#chart-intents .xaxislayer-above").text_content()
    assert dialogs == []


def test_ladder_runs_compare_their_sustained_qps_and_first_rounds(seeded, server_url, new_page, shot):
    from controlplane.accounts.models import User
    from controlplane.replays.comparison_services import replay_comparison_create

    agent = User.objects.get(username="agent")
    tuned = TemplateVersion.objects.get(template__name="chat-default", number=1)
    defaults = template_version_create(
        actor=agent, template=tuned.template, document=DEFAULTS, base_number=tuned.template.latest_number
    )
    staging = Pool.objects.get(name="staging")
    steps = {"qps_steps": (20.0, 40.0, 60.0), "step_s": 10, "n": 900}
    low = finished_run(actor=agent, pool=staging, version=defaults, median_s=0.7, seed=3, **steps)
    high = finished_run(actor=agent, pool=staging, version=tuned, median_s=0.5, seed=4, **steps)
    comparison = replay_comparison_create(actor=agent, run_ids=[low.pk, high.pk], resamples=200)
    sustained = [run["figures"]["ladder"]["sustained_qps"] for run in comparison.result["runs"]]

    page = new_page()
    open_signed_in(page, server_url, "oncall", f"/replays/comparisons/{comparison.pk}/")
    verdict = page.locator("[data-testid=verdict] p").first.inner_text()
    assert f"sustains {sustained[1]:g} QPS and run {low.pk} (chat-default v2) {sustained[0]:g} QPS" in verdict
    row = page.locator(f'[data-testid=slo-table] tr[data-run="{high.pk}"]').inner_text()
    assert f"{sustained[1]:g}" in row
    assert page.locator('[data-testid=figures] tr[data-figure="ladder.sustained_qps"]').count() == 1
    assert page.locator('[data-testid=figures] tr[data-figure="latency.first_round_s.p99"]').count() == 1
    shot(page, "93-replay-ladder-comparison")
    page.goto(f"{server_url}/replays/{high.pk}/")
    ladder = page.locator("[data-testid=replay-figures] [data-testid=run-ladder] tbody tr")
    assert ladder.count() == 3 and "met" in ladder.first.inner_text().lower()
    page.locator("[data-testid=sustained-qps]").click()
    page.wait_for_url("**/figures/requests/?figure=ladder.sustained_qps")
    assert page.locator("[data-testid=figure-info]").inner_text().startswith("300 requests")
    page.goto(f"{server_url}/replays/{high.pk}/")
    shot(page, "94-replay-ladder-run")
