"""The strict tier on RE2 and the bounded scan: what the shipped patterns catch is what they caught under Python's re,
and what the policy reads of a message is bounded (docs/policy-patterns.md)."""

import json
import math
import random
import re

import pytest

from engine_node.policy.dataset import load_examples
from engine_node.policy.explain import estimate_tokens
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.rules import CLASSIFIER_EDGE_CHARS, DEFAULT_STRICT_PATTERNS, REGEX_EDGE_CHARS, Policy, edges

# The defaults as shipped before RE2, run by Python's re: the behaviour users relied on.
PYTHON_DEFAULTS = [
    *DEFAULT_STRICT_PATTERNS[:2],
    r"(?<!\d)1[3-9]\d{9}(?!\d)",
    r"(?<!\d)\d{17}[\dXx](?!\d)",
]
AMOUNT, ORDER, PHONE, ID_NUMBER = range(4)
FILLER = "这是一段很长的粘贴内容，包括商品介绍和聊天记录。"


@pytest.fixture(scope="module")
def classifier():
    return IntentClassifier.load()


@pytest.fixture(scope="module")
def policy():
    return Policy(None)


def python_hits(text: str) -> list[str | None]:
    found = [re.search(pattern, text) for pattern in PYTHON_DEFAULTS]
    return [match.group(0) if match else None for match in found]


def re2_hits(policy: Policy, text: str) -> list[str | None]:
    by_pattern = {hit.pattern: hit.match for hit in policy.strict_hits(text)}
    return [by_pattern.get(pattern) for pattern in DEFAULT_STRICT_PATTERNS]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("我付了¥1,299.00怎么还显示未支付", {AMOUNT: "¥1,29"}),
        ("这件1299元的羽绒服能便宜点吗", {AMOUNT: "1299元"}),
        ("付款 1299.50 元 扣了两次", {AMOUNT: "1299.50 元"}),
        ("全角的￥１２９９也是金额", {AMOUNT: "￥１２９９"}),  # full-width digits: \d is Unicode, as in Python
        ("１２９９元", {AMOUNT: "１２９９元"}),
        ("我付了￥\u3000299", {AMOUNT: "￥\u3000299"}),  # the ideographic space is \s, as in Python
        ("I was charged $49.99 twice", {AMOUNT: "$49.99"}),
        ("订单号：DD20241111887766 到哪了", {ORDER: "订单号：DD20241111887766"}),
        ("Order No. 20240611-8891 hasn't shipped", {ORDER: "Order No. 20240611-8891"}),
        ("where is my order #A1B2C3D4E5?", {ORDER: "order #A1B2C3D4E5"}),
        ("我的手机号13812345678收不到验证码", {PHONE: "13812345678"}),
        ("13812345678", {PHONE: "13812345678"}),
        ("电话：19912345678。", {PHONE: "19912345678"}),
        ("号码是138123456789对吗", {}),  # twelve digits: not a phone number
        ("+8613812345678", {}),  # a digit right before it, as with the old look-behind
        ("手机 138 1234 5678", {}),
        ("全角１３８１２３４５６７８", {}),  # the leading 1 is ASCII in the pattern, then and now
        ("身份证号11010519491231002X 实名认证失败", {ID_NUMBER: "11010519491231002X"}),
        ("身份证110105194912310021", {ID_NUMBER: "110105194912310021"}),
        ("1101051949123100211", {}),  # nineteen digits
        ("订单12345678901，电话13812345678", {ORDER: "订单12345678901", PHONE: "13812345678"}),
        ("有什么适合送女朋友的生日礼物推荐吗", {}),
    ],
)
def test_the_shipped_patterns_catch_amounts_order_numbers_phones_and_ids_as_before(policy, message, expected):
    wanted = [expected.get(index) for index in range(4)]
    assert re2_hits(policy, message) == wanted
    assert python_hits(message) == wanted


def test_every_dataset_message_gets_the_same_strict_hits_as_under_python_re(policy):
    rng = random.Random(4)
    extra = ["".join(rng.choice("1234567890１２元¥￥$.,: 订单号orderNo#Xx-") for _ in range(40)) for _ in range(3000)]
    differ = [
        text
        for text in [example.text for example in load_examples()] + extra
        if re2_hits(policy, text) != python_hits(text)
    ]
    assert differ == []


def test_a_strict_trigger_in_the_first_or_last_2048_characters_matches_wherever_the_message_is_long(policy):
    filler = (FILLER * 3000)[:50_000]
    for message in (
        "手机号13812345678，" + filler,
        filler + "，手机号13812345678",
        filler[: 2 * REGEX_EDGE_CHARS - 20] + "13812345678",  # up to 4,096 characters the whole message is read
        filler[: REGEX_EDGE_CHARS - 11] + "13812345678" + filler,  # ends on the last character of the head
    ):
        decision = policy.decide(message)
        assert (decision.tier_rule, [hit.match for hit in decision.regex_hits]) == ("regex", ["13812345678"])
    # The bound: the middle of a long message is not read.
    middle = filler[:25_000] + "13812345678" + filler[:25_000]
    assert policy.decide(middle).regex_hits == ()
    assert edges(middle, REGEX_EDGE_CHARS) == f"{middle[:REGEX_EDGE_CHARS]}\n{middle[-REGEX_EDGE_CHARS:]}"


def test_the_classifier_reads_the_first_and_last_characters_of_a_long_message(classifier):
    policy = Policy(None, None, classifier)
    ask = "有什么适合送女朋友的生日礼物推荐吗？"
    message = ask + FILLER * 400 + ask
    assert policy.classify(message) == classifier.classify(
        f"{message[:CLASSIFIER_EDGE_CHARS]}\n{message[-CLASSIFIER_EDGE_CHARS:]}"
    )
    decision = policy.decide(message)
    assert (decision.intent, decision.tier) == ("product_recommendation", "creative")
    # Short messages are read whole.
    assert policy.classify(ask) == classifier.classify(ask)


@pytest.mark.parametrize(
    "message",
    [
        "1" * 20_000,
        "单" * 20_000,
        "😀" * 5000,
        "a" + "\u0301\u0316" * 5000,
        json.loads('"' + "\\ud800\\udfff\\ud83d" * 3000 + '"'),  # lone surrogates, as JSON allows
        "\u200b" * 10_000,
        " " * 10_000,
    ],
)
def test_hostile_messages_get_an_ordinary_decision(classifier, message):
    decision = Policy(None, None, classifier).decide(message, prompt_tokens=estimate_tokens(message))
    assert decision.tier in ("strict", "normal", "creative")


def test_the_token_estimate_counts_cjk_characters_as_the_regex_did():
    cjk = re.compile(r"[\u3000-\u9fff\uf900-\ufaff\uff00-\uffff]")
    rng = random.Random(8)
    samples = ["", "Tell me a story", "我的订单到哪了？", "ＡＢＣ￥", "😀👍", "\ud800x\udfff"]
    samples.append("\uffff\ufff0\u2fff\ua000")
    for _ in range(2000):
        ranges = [(0, 0x7F), (0x2F00, 0xA100), (0xF800, 0xFFFF), (0xD800, 0xDFFF), (0x10000, 0x10FFFF)]
        samples.append("".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 60))))
    for text in samples:
        count = len(cjk.findall(text))
        assert estimate_tokens(text) == count + math.ceil((len(text) - count) / 4), ascii(text)
