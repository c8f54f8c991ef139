"""Personal data in a sampled message is replaced by typed placeholders before it leaves the node."""

import pytest

from engine_node.policy.masking import (
    ADDRESS,
    CARD,
    EMAIL,
    ID_NUMBER,
    NUMBER,
    ORDER,
    PHONE,
    luhn_valid,
    mask,
    with_stand_ins,
)


@pytest.mark.parametrize(
    ("text", "secret", "placeholder"),
    [
        ("我的手机13812345678，快点回电", "13812345678", PHONE),
        ("手机 +86 138-1234-5678 联系我", "1234-5678", PHONE),
        ("call me on +44 20 7946 0958 tonight", "7946 0958", PHONE),
        ("my number is (415) 555-0100", "555-0100", PHONE),
        ("身份证号110101199003074578要改", "110101199003074578", ID_NUMBER),
        ("ID 11010119900307457X please", "11010119900307457X", ID_NUMBER),
        ("订单号：20231105778812 还没发货", "20231105778812", ORDER),
        ("order #A12B34C56 never arrived", "A12B34C56", ORDER),
        ("tracking number SF1234567890 stuck", "SF1234567890", ORDER),
        ("charged twice on 4111 1111 1111 1111!", "4111 1111 1111 1111", CARD),
        ("卡号5500-0000-0000-0004扣了两次", "5500-0000-0000-0004", CARD),
        ("refund to jane.doe+shop@example.co.uk", "jane.doe+shop@example.co.uk", EMAIL),
        ("寄到广东省深圳市南山区科技园路18号3栋201室", "科技园路18号", ADDRESS),
        ("送到北京市朝阳区建国路88号", "建国路88号", ADDRESS),
        ("地址是南京东路100号3栋", "南京东路100号", ADDRESS),
        ("ship it to 123 Main St, Apt 4B please", "123 Main St", ADDRESS),
        ("I live at 42 Baker Street, London", "42 Baker Street", ADDRESS),
        ("parcel code 88231907 at the locker", "88231907", NUMBER),
    ],
)
def test_personal_data_is_replaced_by_its_placeholder(text, secret, placeholder):
    masked = mask(text)
    assert secret not in masked
    assert placeholder in masked


@pytest.mark.parametrize(
    "text",
    [
        "is this moisturiser ok for eczema?",
        "这个面霜适合敏感肌吗",
        "我买了3件，一共199元，能便宜点吗",
        "the cup arrived broken, what are you going to do",
        "这个城市的区别是什么",
        "buy 2 get 1 free until 11/11?",
        "size 38 or 39 for a 24.5 cm foot?",
    ],
)
def test_ordinary_messages_are_left_alone(text):
    assert mask(text) == text


def test_a_digit_run_that_fails_luhn_is_not_called_a_card_but_still_goes():
    masked = mask("ref 4111111111111112 please")
    assert CARD not in masked and "4111111111111112" not in masked


def test_no_run_of_six_digits_survives_whatever_the_context():
    masked = mask("a1234567b 7654321 x99887766y 手机号是一三八 13800000000 and 00000000000000000000")
    assert not any(len(run) >= 6 for run in "".join(c if c.isdigit() else " " for c in masked).split())


def test_masking_is_idempotent_and_keeps_the_question():
    once = mask("订单20231105778812的退款到账了吗？卡号4111111111111111，手机13812345678")
    assert mask(once) == once
    assert "退款到账了吗" in once


def test_hostile_texts_are_masked_without_error():
    for text in ["\ud800" + "1" * 5000, "@" * 4000 + "a@b.c", "1 " * 3000, "路" * 3000 + "1号", "市区" * 2000]:
        assert isinstance(mask(text), str)


def test_luhn():
    assert luhn_valid("4111111111111111") and luhn_valid("5500000000000004")
    assert not luhn_valid("4111111111111112")


def test_stand_ins_put_fictitious_values_of_each_kind_back():
    masked = mask("订单20231105778812没到，手机13812345678，寄到北京市朝阳区建国路88号")
    restored = with_stand_ins(masked)
    assert "<" not in restored and "20240101000000" in restored and "13800000000" in restored
    assert "13812345678" not in restored and "建国路88号" not in restored
    assert with_stand_ins(mask("ship to 123 Main St, mail a@b.com")) == "ship to 1 Main St, mail user@example.com"
    # Each stand-in is masked again as its kind: it reads as the data it stands for.
    assert mask(restored) == masked
