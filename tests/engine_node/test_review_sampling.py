"""The gateway's review sampler: which decisions it keeps, how few, and that what it hands out is masked."""

import time
from dataclasses import replace

import pytest

from engine_node.policy.intent import IntentClassifier
from engine_node.policy.rules import Policy
from engine_node.review_sampling import MARGIN, MAX_TEXT_CHARS, ReviewSampler


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def policy():
    return Policy(None, None, IntentClassifier.load())


def unsure(policy):
    """A real decision, judged against a floor above any confidence."""
    return replace(policy.decide("随便问问"), confidence_floor=1.01)


def test_a_decision_below_the_floor_is_kept_and_a_confident_one_is_not(policy):
    sampler = ReviewSampler()
    decision = policy.decide("我的订单到哪了，怎么还没发货")
    assert decision.confidence - decision.runner_up_confidence >= MARGIN  # a clear call of the shipped model
    at_floor = replace(decision, confidence_floor=decision.confidence)
    assert sampler.reasons(at_floor) == ()
    assert not sampler.offer("我的订单到哪了，怎么还没发货", at_floor)
    above = replace(decision, confidence_floor=1.01)
    assert sampler.reasons(above) == ("below_floor",)
    assert sampler.offer("我的订单到哪了，怎么还没发货", above)
    assert len(sampler) == 1


def test_a_close_runner_up_is_a_reason_even_above_the_floor(policy):
    decision = policy.decide("is this moisturiser ok for eczema")
    judged = replace(decision, confidence_floor=0.8)
    close = replace(judged, confidence=0.85, runner_up="other", runner_up_confidence=0.85 - MARGIN / 2)
    far = replace(judged, confidence=0.95, runner_up="other", runner_up_confidence=0.01)
    assert ReviewSampler().reasons(close) == ("close_runner_up",)
    assert ReviewSampler().reasons(far) == ()


def test_an_override_is_a_reason_and_a_business_tag_is_not(policy):
    bundle = {"overrides": [{"conversation": "c-1", "tier": "strict", "set_by": "amy", "expires_at": time.time() + 60}]}
    overridden = Policy(None, bundle, policy.classifier).decide("推荐一款口红", conversation="c-1")
    assert "override" in ReviewSampler().reasons(replace(overridden, confidence_floor=0.0))
    tagged = policy.decide("推荐一款口红", business_tag="copywriting")
    assert ReviewSampler().reasons(replace(tagged, confidence_floor=1.01)) == ()


def test_the_rate_limit_allows_a_burst_then_the_steady_rate(policy):
    clock = Clock()
    sampler = ReviewSampler(rate_per_minute=60, burst=3, clock=clock)
    decision = unsure(policy)
    kept = [sampler.offer(f"message {i}", decision) for i in range(10)]
    assert kept == [True] * 3 + [False] * 7
    assert sampler.rate_limited == 7
    clock.now += 2.0  # one a second
    assert [sampler.offer(f"later {i}", decision) for i in range(3)] == [True, True, False]


def test_the_buffer_is_bounded_and_drops_the_oldest(policy):
    sampler = ReviewSampler(rate_per_minute=1e9, burst=1000, capacity=5)
    decision = unsure(policy)
    for i in range(12):
        sampler.offer(f"message number {chr(97 + i)}", decision)
    assert len(sampler) == 5 and sampler.dropped == 7
    assert [s["text"] for s in sampler.batch()] == [f"message number {chr(97 + i)}" for i in range(7, 12)]
    assert len(sampler) == 0


def test_a_batch_is_masked_bounded_and_carries_the_decision(policy):
    sampler = ReviewSampler(rate_per_minute=1e9, burst=1000)
    decision = unsure(policy)
    sampler.offer("手机13812345678 订单号20231105778812 退款" + "啊" * 2000, decision)
    for i in range(60):
        sampler.offer(f"q{i}", decision)
    first = sampler.batch(limit=50)
    assert len(first) == 50 and len(sampler) == 11
    sample = first[0]
    assert "13812345678" not in sample["text"] and "<PHONE>" in sample["text"] and "<ORDER>" in sample["text"]
    assert len(sample["text"]) <= MAX_TEXT_CHARS
    assert sample["intent"] == decision.intent and sample["confidence"] == decision.confidence
    assert sample["runner_up"] == decision.runner_up and "below_floor" in sample["reasons"]
    assert set(sample) == {"text", "intent", "confidence", "runner_up", "runner_up_confidence", "reasons", "tier"}


def test_an_empty_message_is_never_kept(policy):
    decision = unsure(policy)
    assert not ReviewSampler().offer("", decision)


def test_the_sampler_counters_are_on_the_agents_metrics_page(policy):
    from engine_node import metrics

    clock = Clock()
    sampler = ReviewSampler(rate_per_minute=60, burst=3, capacity=2, clock=clock)
    metrics.watch_review(sampler)
    decision = unsure(policy)
    for i in range(5):
        sampler.offer(f"message {i}", decision)  # three kept (the third pushes the first out), two rate-limited
    text = metrics.render()
    assert 'engine_node_review_samples_total{outcome="kept"} 3.0' in text
    assert 'engine_node_review_samples_total{outcome="rate_limited"} 2.0' in text
    assert 'engine_node_review_samples_total{outcome="dropped"} 1.0' in text
    assert "engine_node_review_samples_pending 2.0" in text
    sampler.batch()
    assert "engine_node_review_samples_pending 0.0" in metrics.render()
