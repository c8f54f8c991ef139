"""The comparison pages: the compare form (and its refusals), the comparison page, run figures, requests behind."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.nodes.models import EngineNode
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.models import ReplayRun
from tests.replays.factories import finished_run
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text_of(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


@pytest.fixture
def two_runs(agent, staging, versions):
    v1, v2 = versions
    slow = finished_run(actor=agent, pool=staging, version=v1, median_s=1.2, n=600, seed=1, slow_intent="coupon")
    fast = finished_run(actor=agent, pool=staging, version=v2, median_s=0.5, n=600, seed=2)
    return slow, fast


def test_compare_from_the_list_with_a_chosen_baseline(agent, two_runs):
    slow, fast = two_runs
    client = client_for(agent)
    page = client.get(reverse("dashboard:replay-comparisons"))
    assert f'value="{slow.pk}"' in page.content.decode()
    response = client.post(
        reverse("dashboard:replay-comparisons"), {"runs": [fast.pk, slow.pk], "baseline": slow.pk, "label": "tuned"}
    )
    comparison = ReplayComparison.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/replays/comparisons/{comparison.pk}/"
    assert [m.run_id for m in comparison.members.all()] == [slow.pk, fast.pk]


def test_compare_form_refusal_names_the_field_and_stores_nothing(agent, staging, versions, two_runs):
    running = finished_run(actor=agent, pool=staging, version=versions[0], n=10, status=ReplayRun.Status.RUNNING)
    response = client_for(agent).post(reverse("dashboard:replay-comparisons"), {"runs": [two_runs[0].pk, running.pk]})
    assert response.status_code == 400
    assert f"runs: only finished runs can be compared: run {running.pk} is running" in text_of(response)
    assert client_for(agent).post(reverse("dashboard:replay-comparisons"), {"runs": ["x"]}).status_code == 400
    assert not ReplayComparison.objects.exists()


def test_oncall_reads_but_may_not_compare(oncall, two_runs):
    client = client_for(oncall)
    page = client.get(reverse("dashboard:replay-comparisons"))
    assert page.status_code == 200 and 'data-testid="compare-form"' not in page.content.decode()
    assert client.post(reverse("dashboard:replay-comparisons"), {"runs": [r.pk for r in two_runs]}).status_code == 403
    assert not ReplayComparison.objects.exists()


def test_comparison_page_shows_verdict_figures_diff_and_the_simulated_label(agent, oncall, two_runs):
    slow, fast = two_runs
    EngineNode.objects.create(name="sim-1", pool=slow.pool, backend="simulator")
    comparison = replay_comparison_create(actor=agent, run_ids=[slow.pk, fast.pk])
    response = client_for(oncall).get(reverse("dashboard:replay-comparison", args=[comparison.pk]))
    assert response.status_code == 200
    text = text_of(response)
    assert "meets the P99 SLO" in text and "beyond noise" in text
    assert 'data-testid="simulated-label"' in response.content.decode()
    assert "temperature.strict" in text  # the version diff
    body = response.content.decode()
    assert f"/replays/{slow.pk}/figures/requests/?figure=latency.e2e_s.p99" in body
    assert 'id="comparison-charts"' in body


def test_run_figures_and_the_requests_behind_a_figure(oncall, two_runs):
    slow, _ = two_runs
    client = client_for(oncall)
    page = client.get(reverse("dashboard:replay-figures", args=[slow.pk]))
    assert page.status_code == 200
    assert 'data-intent="coupon"' in page.content.decode()
    behind = client.get(reverse("dashboard:replay-figure-requests", args=[slow.pk]), {"figure": "intents.coupon.p99"})
    assert behind.status_code == 200
    assert "requests." in text_of(behind)
    bad = client.get(reverse("dashboard:replay-figure-requests", args=[slow.pk]), {"figure": "nope"})
    assert bad.status_code == 400 and "figure: unknown figure" in text_of(bad)


def test_the_run_page_shows_figures_of_a_finished_run_and_links_to_compare(agent, two_runs, staging, versions):
    slow, _ = two_runs
    client = client_for(agent)
    page = client.get(reverse("dashboard:replay-detail", args=[slow.pk]))
    body = page.content.decode()
    assert page.status_code == 200 and 'data-intent="coupon"' in body
    assert "{#" not in body and "{%" not in body
    assert f"/replays/comparisons/?runs={slow.pk}" in body
    running = finished_run(actor=agent, pool=staging, version=versions[0], n=10, status=ReplayRun.Status.RUNNING)
    assert (
        'data-intent="coupon"' not in client.get(reverse("dashboard:replay-detail", args=[running.pk])).content.decode()
    )
    assert 'data-testid="compare-runs"' in client.get(reverse("dashboard:replays")).content.decode()
    preselected = client.get(reverse("dashboard:replay-comparisons"), {"runs": slow.pk}).content.decode()
    assert re.search(rf'value="{slow.pk}" aria-label="compare run {slow.pk}" checked', preselected)


def test_pages_show_first_round_figures_and_a_ladders_steps(
    agent, oncall, staging, versions, two_runs, settings, tmp_path
):
    settings.CONVERSATION_LOG_DIR = tmp_path
    log = store_log(agent, log_lines(5))
    slow, fast = two_runs
    client = client_for(oncall)
    figures = text_of(client.get(reverse("dashboard:replay-figures", args=[slow.pk])))
    assert "first round (user-facing)" in figures
    comparison = replay_comparison_create(actor=agent, run_ids=[slow.pk, fast.pk])
    body = client.get(reverse("dashboard:replay-comparison", args=[comparison.pk])).content.decode()
    assert f"/replays/{fast.pk}/figures/requests/?figure=latency.first_round_s.p99" in body
    assert "first-round latency P99" in text_of_html(body) and "first-round P99" in text_of_html(body)
    steps = {"qps_steps": (20.0, 40.0), "step_s": 10, "n": 400}
    ladder = finished_run(actor=agent, pool=staging, version=versions[1], median_s=0.5, seed=4, **steps)
    page = client.get(reverse("dashboard:replay-detail", args=[ladder.pk]))
    text = text_of(page)
    assert "ladder 20.0 → 40.0 QPS, 10 s each, P99 line 1.8 s" in text
    assert "Ladder: sustained 40 QPS" in text and 'data-testid="run-ladder"' in page.content.decode()
    behind = client.get(
        reverse("dashboard:replay-figure-requests", args=[ladder.pk]), {"figure": "ladder.sustained_qps"}
    )
    assert behind.status_code == 200 and "200 requests" in text_of(behind)
    # The new-run form takes a ladder: its steps reach the run, and a descending one is refused naming the field.
    form = {"pool": staging.name, "log": log.name, "reason": "capacity", "selection": "all", "pacing": "ladder",
            "qps": 10, "qps_steps": "20, 40", "step_s": 5, "arrival": "poisson", "duration_cap_s": 300}  # fmt: skip
    created = client_for(agent).post(reverse("dashboard:replay-new"), form)
    assert created.status_code == 302, text_of(created)
    run = ReplayRun.objects.get(label="", reason="capacity")
    assert (run.qps, run.qps_steps, run.step_s, run.duration_cap_s) == (None, [20.0, 40.0], 5, 10)
    refused = client_for(agent).post(reverse("dashboard:replay-new"), {**form, "qps_steps": "40, 20"})
    assert refused.status_code == 400 and "qps_steps: must go up" in text_of(refused)
    # Its own P99 line (a team's SLO) reaches the run; a line of zero is refused naming the field.
    own_line = {**form, "reason": "own line", "slo_p99_s": "2.5"}
    created = client_for(agent).post(reverse("dashboard:replay-new"), own_line)
    assert created.status_code == 302, text_of(created)
    assert ReplayRun.objects.get(reason="own line").ladder.p99_max_s == 2.5
    refused = client_for(agent).post(reverse("dashboard:replay-new"), {**form, "slo_p99_s": "0"})
    assert refused.status_code == 400 and "slo_p99_s: must be between" in text_of(refused)


def text_of_html(body: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))
