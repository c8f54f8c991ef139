"""Intent drift: a pool's share of classified requests below the confidence floor against its own baseline and an
absolute line, judged only with enough classified requests (windows made short; pool rows at a fake clock)."""

import pytest

from controlplane.alerts import intent_drift
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.exposition import exposition
from controlplane.alerts.models import Alert, AlertRuleVersion

RULES = ("intent-drift", "intent-unsure")
STEP_S = 2


@pytest.fixture(autouse=True)
def short_windows(settings):
    settings.ALERT_INTENT_DRIFT_WINDOW_S = 20
    settings.ALERT_INTENT_DRIFT_BASELINE_S = 60
    settings.ALERT_INTENT_DRIFT_MIN_REQUESTS = 50


def rows(share: float, classified: float, seconds: int, start: float = 0.0) -> list[tuple[float, float, float]]:
    return [(start + t, classified, share) for t in range(0, seconds, STEP_S)]


def totals(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """A window as the database sums it: classified requests, and those below the floor."""
    return sum(n for _, n, _ in rows), sum(n * share for _, n, share in rows)


def test_a_share_well_above_the_baseline_is_a_rise_and_a_steady_one_is_none():
    baseline = rows(0.05, 100, 60)
    risen = intent_drift.judge(
        totals(rows(0.40, 100, 20, 60)), baseline, window_resolution_s=1, baseline_resolution_s=1, baseline_s=60
    )
    assert risen["intent_drift_share"] == pytest.approx(0.40)
    assert risen["intent_drift_rise"] == pytest.approx(0.35)
    steady = intent_drift.judge(
        totals(rows(0.06, 100, 20, 60)), baseline, window_resolution_s=1, baseline_resolution_s=1, baseline_s=60
    )
    assert steady["intent_drift_rise"] == pytest.approx(0.01)


def test_the_window_weights_rows_by_classified_requests_and_the_baseline_takes_the_median():
    window = totals([(0, 90, 0.0), (2, 10, 1.0)])  # 10 % of the requests, though half the rows are at 100 %
    baseline = [(-60, 100, 0.02), (-40, 100, 0.04), (-20, 100, 0.9)]  # one burst does not lift the median
    values = intent_drift.judge(window, baseline, window_resolution_s=60, baseline_resolution_s=60, baseline_s=60)
    assert values["intent_drift_share"] == pytest.approx(0.10)
    assert values["intent_drift_rise"] == pytest.approx(0.10 - 0.04)


def test_too_few_classified_requests_judge_nothing():
    # 10 rows of 40 classified over a 10 s sample window: 40 requests, under the 50 needed.
    thin = intent_drift.judge(
        totals(rows(0.9, 40, 20, 60)),
        rows(0.05, 100, 60),
        window_resolution_s=1,
        baseline_resolution_s=1,
        baseline_s=60,
    )
    assert thin == {"intent_drift_share": None, "intent_drift_rise": None}


def test_without_a_baseline_only_the_absolute_share_is_judged():
    young = intent_drift.judge(
        totals(rows(0.5, 100, 20, 60)),
        rows(0.05, 100, 20, 40),
        window_resolution_s=1,
        baseline_resolution_s=1,
        baseline_s=60,
    )  # the baseline covers a third of its range
    assert young["intent_drift_share"] == pytest.approx(0.5) and young["intent_drift_rise"] is None


def run(fleet, clock, seconds: int, share: float, classified: int, pool: str = "prod-main") -> None:
    for _ in range(0, seconds, STEP_S):
        at = clock.tick(STEP_S)
        fleet.aggregate("pool", pool, at, intent_classified=classified, intent_below_floor_share=share)
        evaluate(now=at)


def alerts(pool: str = "prod-main") -> dict[str, Alert]:
    return {a.rule.name: a for a in Alert.objects.filter(name=pool, rule__name__in=RULES).select_related("rule")}


@pytest.fixture
def immediate(default_rules):
    """The rules' `for` is a minute; the windows here are seconds long."""
    AlertRuleVersion.objects.filter(rule__name__in=RULES).update(for_s=0)


def test_a_pool_whose_traffic_shifts_to_unsure_messages_fires_both_rules(fleet, clock, immediate):
    run(fleet, clock, 80, share=0.05, classified=100)
    assert alerts() == {}  # a steady pool: quiet
    run(fleet, clock, 20, share=0.45, classified=100)
    fired = alerts()
    assert fired["intent-drift"].state == Alert.State.FIRING and fired["intent-drift"].severity == "critical"
    assert fired["intent-drift"].value == pytest.approx(0.40, abs=0.01)
    assert fired["intent-unsure"].state == Alert.State.FIRING and fired["intent-unsure"].severity == "warning"
    assert fired["intent-drift"].rule_version.runbook == "intent-drift"
    text = exposition(now=clock.now).decode()
    assert 'controlplane_pool_intent_drift_rise_ratio{pool="prod-main"}' in text


def test_a_few_unsure_messages_on_a_quiet_pool_page_nobody(fleet, clock, immediate):
    run(fleet, clock, 80, share=0.05, classified=3)
    run(fleet, clock, 20, share=1.0, classified=3)  # every one below the floor, but 6 requests in the window
    assert alerts() == {}
