"""The tuning pages: the list, the new-study form (no production pool offered; refusals name the field) and a study's
page with its trials, chart data and best draft version."""

import json

import pytest
from django.urls import reverse

from controlplane.tuning.models import TuningStudy, TuningTrial
from controlplane.tuning.services import study_create
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db


def form(world, **changes) -> dict:
    data = {
        "pool": "staging",
        "base_version": str(world["v2"].pk),
        "log": world["log"].name,
        "space-0-path": "engine.max_num_seqs",
        "space-0-type": "int",
        "space-0-low": "8",
        "space-0-high": "64",
        "space-0-step": "8",
        "space-1-path": "engine.enable_prefix_caching",
        "space-1-type": "choice",
        "space-1-choices": "true, false",
        "objective": "min_p99",
        "sampler": "tpe",
        "budget": "6",
        "seed": "0",
        "qps": "50",
        "duration_s": "20",
        "arrival": "poisson",
        "reason": "festival",
    }
    data.update(changes)
    return data


def test_the_form_offers_no_production_pool_and_starts_a_study(tuning_world, client, sre):
    client.force_login(sre)
    page = client.get(reverse("dashboard:tuning-new")).content.decode()
    assert 'value="staging"' in page and 'value="prod-main"' not in page
    assert "engine.max_num_seqs (cold)" in page and "temperature.normal (hot)" in page
    response = client.post(reverse("dashboard:tuning-new"), form(tuning_world))
    study = TuningStudy.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:tuning-study", args=[study.pk])
    assert study.space[1] == {
        "path": "engine.enable_prefix_caching",
        "type": "choice",
        "apply": "cold",
        "choices": [True, False],
    }
    assert study.replay_spec["qps"] == 50 and study.budget == 6 and study.replay_spec["repeats"] == 1


def test_the_form_may_pool_the_repeats_requests_for_the_p99_and_refuses_an_unknown_way(tuning_world, client, sre):
    client.force_login(sre)
    response = client.post(reverse("dashboard:tuning-new"), form(tuning_world, repeats="3", repeats_p99="mean"))
    assert response.status_code == 400 and not TuningStudy.objects.exists()
    client.post(reverse("dashboard:tuning-new"), form(tuning_world, repeats="3", repeats_p99="pooled"))
    study = TuningStudy.objects.get()
    assert study.replay_spec["repeats"] == 3 and study.replay_spec["repeats_p99"] == "pooled"
    page = client.get(reverse("dashboard:tuning-study", args=[study.pk])).content.decode()
    assert "3 replays per trial (P99 of their requests pooled)" in page


def test_the_form_repeats_each_trials_replay_and_refuses_zero_naming_the_field(tuning_world, client, sre):
    client.force_login(sre)
    response = client.post(reverse("dashboard:tuning-new"), form(tuning_world, repeats="0"))
    assert response.status_code == 400 and "replay.repeats: must be between 1 and 10" in response.content.decode()
    assert not TuningStudy.objects.exists()
    client.post(reverse("dashboard:tuning-new"), form(tuning_world, repeats="3"))
    study = TuningStudy.objects.get()
    assert study.replay_spec["repeats"] == 3
    page = client.get(reverse("dashboard:tuning-study", args=[study.pk])).content.decode()
    assert "3 replays per trial (median)" in page
    # Every replay of a trial is linked from its row, not only the last.
    TuningTrial.objects.create(
        study=study,
        number=1,
        params={"engine.max_num_seqs": 8},
        state="complete",
        value=1.0,
        steps=[{"qps": 50, "run": 93, "repeats": [{"run": 91}, {"run": 92}, {"run": 93}]}],
    )
    page = client.get(reverse("dashboard:tuning-study", args=[study.pk])).content.decode()
    for run in (91, 92, 93):
        assert f'href="{reverse("dashboard:replay-detail", args=[run])}"' in page


def test_a_refused_study_shows_the_field_and_keeps_the_rows(tuning_world, client, sre):
    client.force_login(sre)
    response = client.post(reverse("dashboard:tuning-new"), form(tuning_world, **{"space-0-high": "9000"}))
    page = response.content.decode()
    assert response.status_code == 400 and "space[0].high: engine.max_num_seqs must be at most 4096" in page
    assert 'value="9000"' in page and not TuningStudy.objects.exists()


def test_agents_see_studies_but_get_no_form(tuning_world, client, agent, sre):
    study_create(actor=sre, **study_args(tuning_world))
    client.force_login(agent)
    assert client.get(reverse("dashboard:tuning-new")).status_code == 403
    assert "New study" not in client.get(reverse("dashboard:tuning")).content.decode()


def test_the_study_page_lists_trials_links_the_best_draft_and_carries_the_chart_data(tuning_world, client, sre):
    study = study_create(actor=sre, **study_args(tuning_world))
    for number, value, feasible in ((1, 2.4, False), (2, 1.1, True)):
        TuningTrial.objects.create(
            study=study,
            number=number,
            params={"engine.max_num_seqs": 8 * number},
            version=tuning_world["v2"],
            state="complete",
            value=value,
            is_feasible=feasible,
            measured={"p99_s": value, "error_rate": 0.0, "output_tokens_per_s": 100.0},
            violations=[] if feasible else ["P99 2.400 s above 1.8 s"],
        )
    TuningStudy.objects.filter(pk=study.pk).update(
        status="succeeded", trials_done=2, best_trial=study.trials.get(number=2)
    )
    client.force_login(sre)
    page = client.get(reverse("dashboard:tuning-study", args=[study.pk])).content.decode()
    assert "P99 2.400 s above 1.8 s" in page and "restart and warm-up each trial" in page
    assert 'href="/templates/chat/v2/"' in page and "unpublished" in page
    chart = json.loads(page.split('id="study-chart-data" type="application/json">')[1].split("</script>")[0])
    assert chart["direction"] == "minimize"
    assert [(t["number"], t["value"], t["is_feasible"]) for t in chart["trials"]] == [(1, 2.4, False), (2, 1.1, True)]
