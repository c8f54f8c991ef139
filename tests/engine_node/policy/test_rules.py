"""The gateway's request policy in both languages: tiers, precedence, max_tokens, queues, sentence ends."""

import time

import pytest

from engine_node.policy.intent import IntentClassifier
from engine_node.policy.rules import Policy, ends_mid_sentence

# The shipped template defaults, as the control plane pushes them (controlplane.params.schema.defaults()).
PATTERNS = [
    r"[¥￥$]\s?\d+(?:[.,]\d{1,2})?|\d+(?:\.\d{1,2})?\s?(?:元|块|RMB|CNY|USD)",
    r"(?i)(?:订单号?|order\s*(?:no\.?|number|id|#))\s*[:：#]?\s*[A-Za-z0-9-]{6,}",
    r"(?:^|\D)(?P<hit>1[3-9]\d{9})(?:\D|$)",
    r"(?:^|\D)(?P<hit>\d{17}[\dXx])(?:\D|$)",
]
PARAMS = {
    "max_tokens": {"default": 256, "whitelist": ["legal"], "hard_ceiling": 2048, "continuation_max_rounds": 2},
    "temperature": {"strict": 0.3, "normal": 0.7, "creative": 0.9, "strict_patterns": PATTERNS},
    "intent": {
        "tiers": {
            "order_status": "strict",
            "return_refund": "normal",
            "product_recommendation": "creative",
            "payment_billing": "strict",
            "coupon_promotion": "normal",
            "account_privacy": "strict",
            "legal_policy": "strict",
            "copywriting": "creative",
            "other": "normal",
        },
        "confidence_floor": 0.8,
    },
    "batch": {"long_context_threshold": 2048},
    "degradation": {"max_tokens": 128, "temperature": 0.7},
}
BUNDLE = {"whitelists": {"legal": ["legal_policy", "legal"], "unused": ["copywriting"]}, "overrides": []}


@pytest.fixture(scope="module")
def classifier():
    return IntentClassifier.load()


@pytest.fixture
def policy(classifier):
    return Policy(PARAMS, BUNDLE, classifier)


@pytest.mark.parametrize(
    "message",
    [
        "我付了¥299.00怎么还显示未支付",
        "付款 1299元 扣了两次！！",
        "I was charged $49.99 twice for the same thing",
        "订单号：DD20241111887766 到哪了",
        "where is my order #A1B2C3D4E5, it's been a week",
        "我的手机号13812345678收不到验证码",
        "身份证号11010519491231002X 实名认证失败",
    ],
)
def test_amounts_order_numbers_phone_and_id_numbers_force_strict(policy, message):
    decision = policy.decide(message)
    assert (decision.tier, decision.tier_rule, decision.temperature) == ("strict", "regex", 0.3)
    assert decision.regex_hits


@pytest.mark.parametrize(
    "message",
    ["有什么适合送女朋友的生日礼物推荐吗", "Can you recommend a good laptop for students?", "帮我写一段促销文案"],
)
def test_recommendations_and_copywriting_are_creative(policy, message):
    decision = policy.decide(message)
    assert (decision.tier, decision.tier_rule, decision.temperature) == ("creative", "intent", 0.9)
    assert decision.confidence >= 0.8


def test_below_the_confidence_floor_the_tier_is_normal(classifier):
    # Several needs at once: no label is sure. (Keyboard mash reads as "other", whose default tier is normal too.)
    message = "订单 优惠券 发票 密码 退款"
    confidence = classifier.classify(message).confidence
    assert confidence < 0.8
    decision = Policy(PARAMS, BUNDLE, classifier).decide(message)
    assert (decision.tier, decision.tier_rule, decision.temperature) == ("normal", "low_confidence", 0.7)
    # Raise the floor above a confident creative message: it falls back to normal too.
    strict_floor = {**PARAMS, "intent": {**PARAMS["intent"], "confidence_floor": 1.01}}
    decision = Policy(strict_floor, BUNDLE, classifier).decide("有什么适合送女朋友的生日礼物推荐吗")
    assert (decision.tier, decision.tier_rule) == ("normal", "low_confidence")


def test_a_business_tag_replaces_the_classifier_but_not_the_regex(policy):
    decision = policy.decide("随便聊聊天气", business_tag="copywriting")
    assert (decision.tier, decision.tier_rule, decision.intent_source) == ("creative", "business_tag", "business_tag")
    assert policy.decide("帮我写文案 ¥99 的那款", business_tag="copywriting").tier_rule == "regex"
    untiered = policy.decide("随便聊聊", business_tag="vip-campaign")
    assert (untiered.tier, untiered.tier_rule) == ("normal", "untiered_tag")


def test_a_whitelisted_legal_request_keeps_its_longer_max_tokens(policy):
    legal_question = "你们的隐私政策里关于个人信息共享的条款是什么"
    by_intent = policy.decide(legal_question, client_max_tokens=1500, granted_tags=frozenset({"legal_policy"}))
    assert (by_intent.max_tokens, by_intent.whitelist, by_intent.continuation_rounds) == (1500, "legal", 0)
    # The same words from a key not granted the intent: the first-turn cap, and a note saying why.
    ungranted = policy.decide(legal_question, client_max_tokens=1500, granted_tags=frozenset({"copywriting"}))
    assert (ungranted.intent, ungranted.max_tokens, ungranted.whitelist) == ("legal_policy", 256, None)
    assert any("legal_policy" in note for note in ungranted.notes)
    by_tag = policy.decide("第十二条怎么解释", business_tag="legal", client_max_tokens=1024)
    assert (by_tag.max_tokens, by_tag.whitelist) == (1024, "legal")
    above = policy.decide("第十二条怎么解释", business_tag="legal", client_max_tokens=100000)
    assert above.max_tokens == 2048 and above.notes


def test_other_requests_are_capped_at_the_first_turn_limit_and_may_continue(policy):
    decision = policy.decide("退货怎么退", client_max_tokens=1500)
    assert (decision.max_tokens, decision.max_tokens_rule, decision.continuation_rounds) == (256, "first-turn cap", 2)
    short = policy.decide("退货怎么退", client_max_tokens=64)
    assert (short.max_tokens, short.continuation_rounds) == (64, 0)
    # A whitelist the template does not name grants nothing.
    assert policy.decide("帮我写一段双十一的促销文案", client_max_tokens=900).max_tokens == 256


def test_a_manual_override_wins_over_regex_and_intent_until_it_expires(classifier):
    now = time.time()
    bundle = {
        **BUNDLE,
        "overrides": [
            {"conversation": "c-1", "tier": "creative", "temperature": None, "reason": "VIP", "set_by": "amy",
             "expires_at": now + 60},
            {"conversation": "c-2", "tier": None, "temperature": 0.15, "reason": "complaint", "set_by": "bo",
             "expires_at": now + 60},
            {"conversation": "c-old", "tier": "creative", "temperature": None, "reason": "x", "set_by": "bo",
             "expires_at": now - 1},
        ],
    }  # fmt: skip
    policy = Policy(PARAMS, bundle, classifier)
    decision = policy.decide("我付了¥299.00怎么还显示未支付", conversation="c-1")
    assert (decision.tier, decision.tier_rule, decision.temperature) == ("creative", "override", 0.9)
    assert decision.override["set_by"] == "amy"
    explicit = policy.decide("有什么推荐", conversation="c-2")
    assert (explicit.temperature, explicit.temperature_rule) == (0.15, "override")
    assert policy.decide("我付了¥299.00", conversation="c-old").tier_rule == "regex"
    assert policy.decide("我付了¥299.00", conversation="c-unknown").tier_rule == "regex"


def test_degradation_wins_over_everything_including_an_override(classifier):
    bundle = {
        **BUNDLE,
        "overrides": [{"conversation": "c-1", "tier": "creative", "temperature": None, "reason": "VIP",
                       "set_by": "amy", "expires_at": time.time() + 60}],
        "degradation": {"active": True, "reason": "load 0.93", "since": time.time()},
    }  # fmt: skip
    policy = Policy(PARAMS, bundle, classifier)
    decision = policy.decide("有什么适合送女朋友的生日礼物推荐吗", conversation="c-1", client_max_tokens=1000)
    assert (decision.temperature, decision.temperature_rule, decision.tier_rule) == (0.7, "degradation", "degradation")
    assert (decision.max_tokens, decision.max_tokens_rule, decision.continuation_rounds) == (128, "degradation", 0)
    legal = policy.decide("隐私政策条款", business_tag="legal", client_max_tokens=1500)
    assert legal.max_tokens == 128 and legal.degraded


def test_long_prompts_go_to_the_long_context_queue(policy):
    assert policy.decide("hi", prompt_tokens=2048).queue == "short"
    decision = policy.decide("hi", prompt_tokens=2049)
    assert decision.queue == "long" and "2049" in decision.queue_rule


def test_without_a_classifier_the_tier_is_normal_unless_a_rule_says_otherwise():
    policy = Policy(PARAMS, BUNDLE, None)
    assert policy.decide("推荐一款手机").tier_rule == "no_intent"
    assert policy.decide("付款¥20").tier == "strict"


def test_an_invalid_pattern_fails_when_the_policy_is_compiled():
    with pytest.raises(Exception, match=r"unterminated|missing"):
        Policy({**PARAMS, "temperature": {**PARAMS["temperature"], "strict_patterns": ["(unclosed"]}})


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("您的订单已经发货，预计明天", True),
        ("您的订单已经发货，预计明天送达。", False),
        ("请按以下步骤操作：", True),
        ("Your parcel left the warehouse and should", True),
        ("Your parcel left the warehouse.", False),
        ("Is there anything else I can help with?", False),
        ('He said "thank you."', False),
        ("好的！", False),
        ("「已为您登记。」", False),
        ("收到啦 😊", False),
        ("您购买的\ufffd", True),  # a cap between the bytes of one character: detokenised as U+FFFD
        ("个月买的\ufffd\ufffd`", True),
        ("Steps:\n1. Open the app,", True),
        ("First paragraph ends here\n\n", False),
        ("", False),
    ],
)
def test_sentence_ends_in_chinese_and_english(text, cut):
    assert ends_mid_sentence(text) is cut


def test_the_agents_policy_defaults_equal_the_template_schema_defaults():
    from controlplane.params import schema
    from engine_node.policy.rules import DEFAULTS

    template = schema.defaults()
    assert {section: template[section] for section in DEFAULTS} == DEFAULTS


def test_a_node_without_a_config_applies_the_default_tiers(classifier):
    policy = Policy(None, None, classifier)
    assert policy.decide("我付了¥299.00怎么还显示未支付").tier == "strict"
    assert policy.decide("有什么适合送女朋友的生日礼物推荐吗").tier == "creative"


def test_a_reply_may_be_streamed_past_the_threshold_only_when_its_max_tokens_is_above_it(classifier):
    params = {**PARAMS, "max_tokens": {**PARAMS["max_tokens"], "streaming_threshold": 200}}
    policy = Policy(params, BUNDLE, classifier)
    assert policy.decide("退货怎么退").stream_after_tokens == 200  # the 256 cap
    assert policy.decide("退货怎么退", client_max_tokens=201).stream_after_tokens == 200
    assert policy.decide("退货怎么退", client_max_tokens=200).stream_after_tokens is None
    assert policy.decide("第十二条怎么解释", business_tag="legal").stream_after_tokens == 200  # hard ceiling
    degraded = Policy(params, {**BUNDLE, "degradation": {"active": True, "reason": "x", "since": 0}}, classifier)
    assert degraded.decide("退货怎么退").stream_after_tokens is None  # 128 tokens under degradation
    assert policy.decide("退货怎么退").as_dict()["stream_after_tokens"] == 200  # what explain shows


def test_a_classified_decision_names_the_runner_up_and_its_probability(policy, classifier):
    message = "the cup arrived broken, what are you going to do"
    decision = policy.decide(message)
    ranked = sorted(classifier.probabilities(message).items(), key=lambda pair: pair[1], reverse=True)
    assert (decision.intent, decision.runner_up) == (ranked[0][0], ranked[1][0])
    assert decision.runner_up_confidence == round(ranked[1][1], 4) <= decision.confidence
    assert decision.intent == classifier.classify(message).label
    tagged = policy.decide(message, business_tag="legal")
    assert (tagged.runner_up, tagged.runner_up_confidence) == (None, None)
