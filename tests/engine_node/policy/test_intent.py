"""The shipped intent model: its honest held-out quality, sensible confidences, and refusal of a tampered file."""

import json
import time
import zlib

import pytest

from engine_node.policy.dataset import HELD_OUT_PATH, LABELS, dataset_sha256, load_examples, load_held_out
from engine_node.policy.intent import (
    CLASSIFIER_EDGE_CHARS,
    MODEL_PATH,
    N_BUCKETS,
    IntentClassifier,
    IntentModelError,
    buckets,
    edges,
    features,
    grams,
)
from engine_node.policy.intent_quality import quality

# Measured on the separately written held-out set (messages no template produced, never trained on; see
# train_intent.py): what the shipped model scored, rounded down, so the test fails if a model is shipped that does
# worse (it measured 0.9276). The report asks for more than 92 %.
HELD_OUT_ACCURACY_FLOOR = 0.92
# Wrong with a confidence at or above the gateway's 0.8 floor (the fallback does not catch those), and the expected
# calibration error: what the shipped model measured (0.0134, 0.0211), rounded up. Reading the first and last 48
# characters instead of 128 moved the calibration error from 0.0163 to 0.0211 (within what 373 messages resolve);
# accuracy and the confidently-wrong share did not move.
CONFIDENTLY_WRONG_CEILING = 0.014
CALIBRATION_ERROR_CEILING = 0.022
CLEAR_ORDER_STATUS = "我的快递到哪了？订单号 5521900387761234，三天没更新了"


@pytest.fixture(scope="module")
def classifier() -> IntentClassifier:
    return IntentClassifier.load()


@pytest.fixture(scope="module")
def held_out_quality(classifier):
    return quality(classifier, load_held_out())


def test_shipped_model_was_trained_on_the_checked_in_dataset_and_judged_on_the_held_out_set(classifier):
    assert classifier.meta["training_set_sha256"] == dataset_sha256()
    assert classifier.meta["split"] == "all"
    assert classifier.meta["held_out"] == HELD_OUT_PATH.name
    assert classifier.labels == list(LABELS)


def test_held_out_accuracy_meets_the_floor_and_is_what_the_file_records(classifier, held_out_quality):
    assert held_out_quality["accuracy"] >= HELD_OUT_ACCURACY_FLOOR
    assert classifier.meta["held_out_accuracy"] == round(held_out_quality["accuracy"], 4)


def test_few_held_out_messages_are_wrong_above_the_gateway_floor_and_confidence_is_calibrated(held_out_quality):
    assert held_out_quality["confidently_wrong"] <= CONFIDENTLY_WRONG_CEILING
    assert held_out_quality["ece"] <= CALIBRATION_ERROR_CEILING


def test_every_label_is_recalled_for_most_of_its_held_out_messages(held_out_quality):
    assert min(held_out_quality["recall"].values()) >= 0.83


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("我双十一买的羽绒服到现在还没发货，订单号 3920118826640012，什么情况？", "order_status"),
        (
            "Hi, my order was supposed to arrive on Monday and the tracking hasn't moved since. Where is it?",
            "order_status",
        ),
        ("面霜用了脸过敏，申请退货退款", "return_refund"),
        ("The shoes I got are too small, I'd like to return them for a refund", "return_refund"),
        ("预算两千左右，想买个拍照好的手机，推荐一下？", "product_recommendation"),
        ("Can you recommend a good laptop for a college student under $800?", "product_recommendation"),
        ("付款的时候银行卡一直扣款失败，怎么办😭", "payment_billing"),
        ("How do I get an invoice for my company for this purchase?", "payment_billing"),
        ("满300减50的券结算时用不了，明明已经满了", "coupon_promotion"),
        ("my promo code isn't working at checkout", "coupon_promotion"),
        ("怎么修改账号的登录密码", "account_privacy"),
        ("Do you share my home address with third parties?", "account_privacy"),
        ("你们这样虚假宣传，违反广告法吧，我要去12315投诉", "legal_policy"),
        ("Where can I read your terms and conditions?", "legal_policy"),
        ("帮我写一段好评，衣服质量很好，物流也快", "copywriting"),
        ("Write a catchy product description for a bamboo cutting board", "copywriting"),
        ("谢谢你，辛苦啦", "other"),
        ("thank you so much, have a nice day!", "other"),
    ],
)
def test_realistic_messages_outside_the_dataset(classifier, text, label):
    assert text not in {example.text for example in load_examples()}
    assert classifier.classify(text).label == label


@pytest.mark.parametrize("text", ["asdkjh qwe zxcv", "xq9 zzp", "？？？", "订单 优惠券 发票 密码 退款"])
def test_gibberish_and_ambiguous_text_gets_less_confidence_than_a_clear_question(classifier, text):
    clear = classifier.classify(CLEAR_ORDER_STATUS)
    unclear = classifier.classify(text)
    assert clear.label == "order_status"
    assert 0.0 <= unclear.confidence < clear.confidence <= 1.0


def test_a_message_naming_several_needs_at_once_stays_below_the_gateway_floor(classifier):
    assert classifier.classify("订单 优惠券 发票 密码 退款").confidence < 0.8


def test_probabilities_cover_every_label_and_sum_to_one(classifier):
    probabilities = classifier.probabilities("退款什么时候到账")
    assert set(probabilities) == set(LABELS)
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert all(0.0 <= p <= 1.0 for p in probabilities.values())


def test_a_model_file_that_does_not_match_its_sha256_is_refused(tmp_path):
    document = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    document["bias"][0] += 1.0
    tampered = tmp_path / "intent_model.json"
    tampered.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(IntentModelError, match="sha256"):
        IntentClassifier.load(tampered)


def test_a_missing_or_unreadable_model_file_is_refused(tmp_path):
    with pytest.raises(IntentModelError):
        IntentClassifier.load(tmp_path / "absent.json")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IntentModelError):
        IntentClassifier.load(tmp_path / "broken.json")


def test_one_message_is_classified_on_its_own(classifier):
    started = time.perf_counter()
    intent = classifier.classify("where is my parcel? order 7731002938471122")
    elapsed_us = (time.perf_counter() - started) * 1e6
    print(f"one message classified in {elapsed_us:.0f} us")  # reported, not asserted: CI machines vary
    assert intent.label == "order_status"


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "？？？",
        "1元" * 300,
        "café naïve résumé",
        "𠀀𠀁 字 ＡＢＣ full-width",
        "ﬁ ligature and 㐀 and 豈 compatibility",
        "\u0000\ufeff",
    ],
)
def test_hashing_slices_lands_on_the_buckets_of_hashing_each_n_gram(extra):
    # buckets() is the hot path's shortcut; a model is trained and shipped on crc32 of grams(), so the two must agree
    # on every message, or a shipped model would be read with the wrong features.
    texts = [extra] + [example.text for example in load_examples()] + [message.text for message in load_held_out()]
    for text in texts if extra == "" else [extra]:
        expected = {zlib.crc32(gram.encode()) & (N_BUCKETS - 1) for gram in grams(text)}
        assert buckets(text) == expected, text


def test_packed_scores_equal_the_sum_of_each_feature_times_its_weight_row(classifier):
    # The scorer sums fixed-point rows packed into one integer each; here the plain definition, in floats.
    messages = [example.text for example in load_examples()[::40]] + [message.text for message in load_held_out()]
    for text in messages:
        plain = list(classifier.bias)
        for bucket, value in features(edges(text, CLASSIFIER_EDGE_CHARS)).items():
            for i, weight in enumerate(classifier.weights.get(bucket, ())):
                plain[i] += value * weight
        assert classifier.scores(text) == pytest.approx(plain, rel=1e-12, abs=1e-12), text


@pytest.mark.parametrize("weight", [40_000.0, -40_000.0, float("nan"), float("inf")])
def test_a_weight_the_packed_rows_cannot_hold_refuses_the_model(classifier, weight):
    weights = {7: (weight,) + (0.0,) * (len(classifier.labels) - 1)}
    with pytest.raises(IntentModelError, match="bucket 7 is out of range"):
        IntentClassifier(labels=classifier.labels, bias=classifier.bias, weights=weights)


def test_the_classifier_reads_the_first_and_last_characters_of_a_message(classifier):
    ask = "is this moisturiser ok for eczema?"
    story = " and then the courier said something else entirely about the weather" * 10
    long_one = ask + story + " anyway, " + ask
    assert classifier.scores(long_one) == classifier.scores(edges(long_one, CLASSIFIER_EDGE_CHARS))
    assert classifier.scores(long_one) != classifier.scores(long_one[:CLASSIFIER_EDGE_CHARS])
    # Up to both edges and the break, the whole message is read; edges of edges are the same text.
    whole = "x" * (2 * CLASSIFIER_EDGE_CHARS + 1)
    assert edges(whole, CLASSIFIER_EDGE_CHARS) == whole
    assert edges(edges(long_one, CLASSIFIER_EDGE_CHARS), CLASSIFIER_EDGE_CHARS) == edges(
        long_one, CLASSIFIER_EDGE_CHARS
    )
