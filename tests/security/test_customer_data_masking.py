"""Customers' personal data in the spellings they really type is masked, ordinary text is left alone, and a text is
cut only after it is masked (so nothing is half-masked at the cut).

Every case is the real masking pass (engine_node/policy/masking.py) and the real review sampler; the outputs are
asserted whole, so a placeholder of the wrong kind, a digit left over or a word eaten fails the test.
"""

import re
from dataclasses import replace

import pytest

from engine_node.policy.intent import IntentClassifier
from engine_node.policy.masking import CONTEXT, PLACEHOLDERS, mask, with_stand_ins
from engine_node.policy.rules import Policy
from engine_node.review_sampling import MAX_TEXT_CHARS, ReviewSampler

# Each spelling that reached the review queue unmasked, then variants of the same kinds.
MASKED = [
    # Phones: dots, ideographic spaces (U+3000, kept around the placeholder as typed), fullwidth digits, numerals.
    ("call me on 138.0013.8000 tonight", "call me on <PHONE> tonight"),
    ("手机\u3000138\u30000013\u30008000，谢谢", "手机\u3000<PHONE>，谢谢"),
    ("手机１３８００１３８０００谢谢", "手机<PHONE>谢谢"),
    ("手机一三八零零一三八零零零", "手机<PHONE>"),
    ("电话幺三八 零零幺三 八零零零", "电话<PHONE>"),
    ("打一三八〇〇一三八〇〇〇找我", "打<PHONE>找我"),
    # Phones: international formats.
    ("+86 138 0013 8000", "<PHONE>"),
    ("回电 0086-138-0013-8000", "回电 <PHONE>"),
    ("call +1 (415) 555-0100 please", "call <PHONE> please"),
    ("London office +44 20 7946 0958", "London office <PHONE>"),
    ("+86-138-0013-8000", "<PHONE>"),
    ("+8613800138000", "<PHONE>"),
    ("１３８－００１３－８０００", "<PHONE>"),
    ("call 1-415-555-0100", "call <PHONE>"),
    ("call 415.555.0100", "call <PHONE>"),
    ("座机（0755）8888 6666", "座机<PHONE>"),
    ("客服电话 400-820-8820", "客服电话 <PHONE>"),
    ("Tokyo +81 90-1234-5678", "Tokyo <PHONE>"),
    # Numbers spelt oddly that no phone rule accepts still go, as numbers.
    ("座机 8888 6666", "座机 <NUMBER>"),
    ("1 3 8 0 0 1 3 8 0 0 0", "<NUMBER>"),
    ("号码 1380 013 8000", "号码 <NUMBER>"),
    # E-mail: fullwidth at sign, internationalised domains and local parts.
    ("邮箱 jane＠example.com 谢谢", "邮箱 <EMAIL> 谢谢"),
    ("发到 用户@例子.中国 吧", "发到 <EMAIL> 吧"),
    ("ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ", "<EMAIL>"),
    ("邮箱jane@example.com谢谢", "邮箱<EMAIL>谢谢"),
    ("mail jane.doe@例子.com", "mail <EMAIL>"),
    ("mail jane﹫example.com", "mail <EMAIL>"),
    # Cards: grouped, Luhn or not, 13-19 digits.
    ("卡号 4111 1111 1111 1112 扣了两次", "卡号 <CARD> 扣了两次"),
    ("card 4111-1111-1111-1111", "card <CARD>"),
    ("amex 3782 822463 10005", "amex <CARD>"),
    ("卡号6222 0212 3456 7890 123", "卡号<CARD>"),
    ("card 4111.1111.1111.1112", "card <CARD>"),
    ("卡号４１１１ １１１１ １１１１ １１１２", "卡号<CARD>"),
    # IBANs, grouped or not, check digits right or wrong, upper or lower case.
    ("IBAN GB82 WEST 1234 5698 7654 32 please", "IBAN <IBAN> please"),
    ("iban de89370400440532013000", "iban <IBAN>"),
    ("IBAN FR14 2004 1010 0505 0001 3M02 606", "IBAN <IBAN>"),
    ("IBAN GB00 WEST 1234 5698 7654 32", "IBAN <IBAN>"),
    # US social security numbers.
    ("my SSN is 078-05-1120", "my SSN is <SSN>"),
    ("SSN 078 05 1120.", "SSN <SSN>."),
    # Chinese resident ID numbers, dashed, spaced, fullwidth, with X.
    ("身份证 110101-19900307-457X", "身份证 <ID>"),
    ("身份证 110101 19900307 4578", "身份证 <ID>"),
    ("身份证１１０１０１１９９００３０７４５７Ｘ", "身份证<ID>"),
    ("身份证号110101199003074578要改", "身份证号<ID>要改"),
    # What the product already masked keeps its kind.
    ("订单号：20231105778812 还没发货", "订单号：<ORDER> 还没发货"),
    ("寄到 北京市朝阳区建国路88号", "寄到 <ADDRESS>"),
    ("IP 192.168.1.100 blocked", "IP <NUMBER> blocked"),
]

# Prices, dates, times, sizes, versions and model names, which a reviewer needs to understand the question.
ORDINARY = [
    "价格 ¥1,299.00",
    "总价￥12,345.67元，能便宜吗",
    "2024-03-15 下的单",
    "2024-03-15 10:30 下单，今天还没到",
    "15.03.2024 ordered, still nothing",
    "ordered 2024/03/15 at 10:30",
    "营业时间9:00-18:00",
    "10:30-11:30 pm",
    "Qwen2.5-7B 和 Llama-3.1-8B-Instruct 哪个好",
    "sizes 36 37 38 39 40 in stock?",
    "一一对应，五一假期发货吗",
    "二〇二四年三月十五日买的",
    "第一二三次都没成功",
    "qty 2, total 3980.50 RMB",
    "我要退3件，一共199元",
    "version 1.2.3 of the app",
    "@客服小王 你好",
    "rated 4.5/5, size 38 or 39 for a 24.5 cm foot?",
    "这个城市的区别是什么",
    "buy 2 get 1 free until 11/11?",
]


@pytest.mark.parametrize(("text", "expected"), MASKED, ids=[f"masked-{i}" for i in range(len(MASKED))])
def test_every_spelling_of_personal_data_is_masked_as_its_kind(text, expected):
    assert mask(text) == expected


@pytest.mark.parametrize("text", ORDINARY, ids=[f"ordinary-{i}" for i in range(len(ORDINARY))])
def test_ordinary_text_is_left_as_the_customer_typed_it(text):
    assert mask(text) == text


@pytest.mark.parametrize(("text", "expected"), MASKED[:12], ids=[f"twice-{i}" for i in range(12)])
def test_masking_a_masked_text_changes_nothing(text, expected):
    assert mask(expected) == expected == mask(mask(text))


def test_stand_ins_of_the_new_kinds_are_fictitious_and_read_as_their_kind_again():
    masked = mask("SSN 078-05-1120, IBAN GB82 WEST 1234 5698 7654 32, 卡 4111 1111 1111 1112")
    assert masked == "SSN <SSN>, IBAN <IBAN>, 卡 <CARD>"
    restored = with_stand_ins(masked)
    assert not any(placeholder in restored for placeholder in PLACEHOLDERS)
    assert "078-05-1120" not in restored and "1112" not in restored
    assert mask(restored) == masked


_PLACEHOLDER = re.compile("|".join(re.escape(placeholder) for placeholder in PLACEHOLDERS))
# Where the cut falls: a phone, an e-mail and a card number written across it.
ACROSS_THE_CUT = [
    ("x" * (MAX_TEXT_CHARS - 6) + " 138 0013 8000 thanks", "138"),
    ("好" * (MAX_TEXT_CHARS - 4) + "13800138000", "1380"),
    ("x" * (MAX_TEXT_CHARS - 9) + " jane.doe@example.com", "jane"),
    ("x" * (MAX_TEXT_CHARS - 10) + " 4111 1111 1111 1112", "4111"),
]


@pytest.mark.parametrize(("text", "piece"), ACROSS_THE_CUT, ids=["phone", "phone-cjk", "email", "card"])
def test_the_cut_comes_after_masking_so_nothing_is_half_masked(text, piece):
    assert piece in text[:MAX_TEXT_CHARS]  # what cutting first would have shown
    masked = mask(text, limit=MAX_TEXT_CHARS)
    assert piece not in masked and not any(char.isdigit() for char in masked)
    assert len(masked) <= MAX_TEXT_CHARS
    # A placeholder that does not fit is left out whole, never cut into "<PHO".
    assert "<" not in _PLACEHOLDER.sub("", masked)


def test_a_text_longer_than_the_part_read_shows_nothing_from_where_data_could_be_cut_in_two():
    # The pass reads MAX_TEXT_CHARS + CONTEXT characters; a number cut there is not shown at all.
    text = "好" * (MAX_TEXT_CHARS + CONTEXT - 5) + "13800138000" + "好" * 100
    masked = mask(text, limit=MAX_TEXT_CHARS)
    assert masked == "好" * MAX_TEXT_CHARS


def test_a_placeholder_is_never_cut_in_two():
    # Each "a@b.cn " grows by one character when masked: the seventh placeholder would pass 50 and is left out.
    assert mask("a@b.cn " * 200, limit=50) == "<EMAIL> " * 6


def test_the_node_sampler_masks_before_it_cuts():
    policy = Policy(None, None, IntentClassifier.load())
    sampler = ReviewSampler(rate_per_minute=1e9, burst=100)
    unsure = replace(policy.decide("随便问问"), confidence_floor=1.01)
    for text, _piece in ACROSS_THE_CUT:
        assert sampler.offer(text + "好" * 2000, unsure)
    for sample, (_text, piece) in zip(sampler.batch(), ACROSS_THE_CUT, strict=True):
        assert piece not in sample["text"] and not any(char.isdigit() for char in sample["text"])
        assert len(sample["text"]) <= MAX_TEXT_CHARS
