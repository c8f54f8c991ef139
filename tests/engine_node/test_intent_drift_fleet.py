"""Intent drift end to end: an agent on the simulator (labelled simulated; only the replies are simulated, the
gateway's classifier is the real one) serves shop messages its classifier is sure of, then the traffic shifts to
messages it is unsure of. The pool's share below the confidence floor rises in the control plane's pool rows and the
`intent-drift` and `intent-unsure` alerts fire (control plane on daphne with Postgres, evaluation in-process at 1 Hz,
the drift windows made short - a 4 s window against the 12 s before it, over 2 s sample windows - and the rules'
`for` set to 0).

The messages are picked by the agent's own built-in classifier at the start of the test, so the test follows the
shipped model: sure ones at or above 0.95, unsure ones under 0.6 (the default floor is 0.8).
"""

import time

import pytest

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertRuleVersion
from controlplane.metrics.models import MetricSample
from engine_node.policy.intent import IntentClassifier
from tests.engine_node.fleet import Traffic
from tests.engine_node.served_pool import served_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

RULES = ("intent-drift", "intent-unsure")
PROFILE = """
latency:
  time_scale: 0.2
reply_length:
  median: 8
  sigma: 0.3
  min: 4
  max: 12
"""
DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16, "continuation_max_rounds": 0},
        "degradation": {"max_tokens": 16},
    }
}
SURE_CANDIDATES = ["我的订单到哪了？", "帮我查一下订单物流", "有什么适合送女朋友的生日礼物推荐吗", "嗯嗯", "hmm ok"]
# New wording the shop's model never saw: a campaign's slang, keyboard mash, a lone interjection.
UNSURE_CANDIDATES = ["嘿", "??", "lorem ipsum dolor", "xkcd 1234 blorp", "qwertyuiop", "asdf qwer zxcv"]


def picked(candidates: list[str], keep) -> list[str]:
    classifier = IntentClassifier.load()
    # The traffic numbers each message ("text #N"): judge a few numberings, keep texts that hold for all.
    chosen = [t for t in candidates if all(keep(classifier.classify(f"{t} #{n}").confidence) for n in (0, 7, 4321))]
    assert len(chosen) >= 2, f"the shipped classifier leaves too few of {candidates}: pick new candidates"
    return chosen


WINDOW_S, BASELINE_S = 4, 12  # production: 600 s against the 3 h before


@pytest.fixture
def node(tmp_path, sre, settings, short_sample_window):
    settings.ALERT_INTENT_DRIFT_WINDOW_S = WINDOW_S
    settings.ALERT_INTENT_DRIFT_BASELINE_S = BASELINE_S
    settings.ALERT_INTENT_DRIFT_MIN_REQUESTS = 20
    with served_pool(tmp_path, sre, document=DOCUMENT, profile=PROFILE, reason="intent drift test") as (agents, _, _):
        install_default_rules(AlertRule, AlertRuleVersion)  # transactional tests empty the migration's pack
        AlertRuleVersion.objects.filter(rule__name__in=RULES).update(for_s=0)
        yield agents[0]


def evaluate_for(seconds: float, until=None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        evaluate()
        if until is not None and until():
            return
        time.sleep(1.0)


def firing() -> dict[str, Alert]:
    alerts = Alert.objects.filter(rule__name__in=RULES, name="staging", state=Alert.State.FIRING)
    return {a.rule.name: a for a in alerts.select_related("rule")}


def pool_share() -> float | None:
    row = MetricSample.objects.filter(scope="pool", name="staging", resolution_s=1).latest("t")
    return row.values.get("intent_below_floor_share")


def test_traffic_shifting_to_messages_the_classifier_is_unsure_of_fires_the_drift_alert(node):
    sure = picked(SURE_CANDIDATES, lambda c: c >= 0.95)
    unsure = picked(UNSURE_CANDIDATES, lambda c: c < 0.6)
    with Traffic([node], per_agent_threads=4, texts=sure) as traffic:
        evaluate_for(WINDOW_S + BASELINE_S)  # the window and the baseline fill with traffic the model knows
        before = pool_share()
        assert before is not None and before < 0.05, before
        assert firing() == {} and not Alert.objects.filter(rule__name__in=RULES).exists()
        traffic.texts = unsure  # a campaign: people write what the model never saw
        evaluate_for(40, until=lambda: set(firing()) == set(RULES))
        after = pool_share()
    fired = firing()
    assert set(fired) == set(RULES), (before, after, fired)
    assert after > 0.5, after
    assert fired["intent-drift"].value >= 0.2 and fired["intent-drift"].severity == "critical"
    assert fired["intent-drift"].rule_version.runbook == "intent-drift"
    assert traffic.errors == []
