"""The quality figures the intent bench and tests report: calibration error, confident mistakes, per-label recall."""

from dataclasses import dataclass

import pytest

from engine_node.policy.intent import IntentClassifier
from engine_node.policy.intent_quality import GATEWAY_FLOOR, expected_calibration_error, quality


@dataclass(frozen=True)
class Message:
    text: str
    label: str
    lang: str


def test_calibration_error_is_the_weighted_gap_between_confidence_and_accuracy_per_bin():
    # Bin 0.9-1.0: confidence 0.95, half right (gap 0.45); bin 0.5-0.6: confidence 0.55, all right (gap 0.45).
    outcomes = [(0.95, True), (0.95, False), (0.55, True), (0.55, True)]
    assert expected_calibration_error(outcomes) == pytest.approx(0.45)
    # Perfectly calibrated: 0.75 confident and three in four right.
    assert expected_calibration_error([(0.75, True)] * 3 + [(0.75, False)]) == pytest.approx(0.0)
    # A confidence of exactly 1.0 falls in the top bin rather than past it.
    assert expected_calibration_error([(1.0, True)]) == pytest.approx(0.0)
    assert expected_calibration_error([]) == 0.0


def test_quality_counts_a_confident_mistake_and_splits_accuracy_by_group():
    classifier = IntentClassifier.load()
    clear = "我的快递到哪了？订单号 5521900387761234，三天没更新了"
    assert classifier.classify(clear).confidence >= GATEWAY_FLOOR
    messages = [Message(clear, "order_status", "zh"), Message(clear, "other", "zh"), Message("thanks!", "other", "en")]
    result = quality(classifier, messages, groups={"lang": "lang"})
    assert result["n"] == 3
    assert result["confidently_wrong"] == pytest.approx(1 / 3)
    assert result["recall"]["order_status"] == 1.0
    assert result["recall"]["payment_billing"] == 0.0  # no message of that label: reported, not a division error
    assert result["groups"]["lang"]["zh"] == pytest.approx(0.5)
    assert 0.0 <= result["ece"] <= 1.0
