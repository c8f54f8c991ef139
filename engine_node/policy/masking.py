"""Replaces personal data in a customer message with typed placeholders before the message leaves the node.

What is masked: e-mail addresses, card numbers (13-19 digits passing the Luhn check, spaces or dashes allowed
between groups), Chinese national ID numbers (18 characters, the last a digit or X), Chinese mobile numbers and
international phone numbers, order numbers (after an order keyword, or any run of 6 or more digits left over), and
street addresses (Chinese 省/市/区 chains and 路/街 ... 号 forms, English "123 Main St" forms). Masking errs towards
masking too much: a reviewer labels the intent, which a placeholder keeps, and no digit run of six or more survives.
Every pattern is linear (no nested quantifiers) and the text is bounded by the caller.
"""

from __future__ import annotations

import re

EMAIL = "<EMAIL>"
CARD = "<CARD>"
ID_NUMBER = "<ID>"
PHONE = "<PHONE>"
ORDER = "<ORDER>"
NUMBER = "<NUMBER>"
ADDRESS = "<ADDRESS>"
PLACEHOLDERS = (EMAIL, CARD, ID_NUMBER, PHONE, ORDER, NUMBER, ADDRESS)
# Fictitious values of each kind, put back before a masked message is classified or trained on: the classifier reads
# digit runs by length (an order number is "#order", a price "#num"), so a placeholder's own letters ("order",
# "phone") would teach it words the gateway never sees in live traffic. None of these is a real person's data.
STAND_INS = {
    EMAIL: "user@example.com",
    CARD: "4111111111111111",
    ID_NUMBER: "110101199001010000",
    PHONE: "13800000000",
    ORDER: "20240101000000",
    NUMBER: "123456",
}
ADDRESS_STAND_INS = {"zh": "北京市朝阳区建国路1号", "en": "1 Main St"}
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8}")
# 13-19 digits, optionally in groups split by one space or dash; checked with Luhn before it is called a card.
_CARD = re.compile(r"(?<![\dA-Za-z])\d(?:[ -]?\d){12,18}(?![\dA-Za-z])")
_CN_ID = re.compile(r"(?<![\dA-Za-z])\d{17}[\dXx](?![\dA-Za-z])")
_CN_MOBILE = re.compile(r"(?<!\d)(?:\+?86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}(?!\d)")
# "+44 20 7946 0958", "+1 (415) 555-0100", "(020) 7946 0958": a plus or a parenthesised area code, then digit groups.
_INTL_PHONE = re.compile(r"(?:\+\d{1,3}[ -]?|\(\d{2,5}\)[ -]?)(?:\(\d{1,5}\)[ -]?)?\d{2,5}(?:[ -]?\d{2,5}){1,4}(?!\d)")
_ORDER = re.compile(
    r"(?i)(订单号?|单号|order\s*(?:no\.?|number|id|#)?|tracking\s*(?:no\.?|number)?)(\s*[:：#]?\s*)"
    r"(?=[A-Za-z0-9-]*\d)[A-Za-z0-9-]{6,40}"
)
_LONG_DIGITS = re.compile(r"\d{6,}")
_CJK = r"[\u4e00-\u9fff]"
# 广东省深圳市南山区…, 上海市浦东新区…: two or more administrative levels in a row, and what follows up to a number.
_CN_REGION = re.compile(
    rf"(?:{_CJK}{{2,7}}(?:省|自治区))?{_CJK}{{2,7}}(?:市|州|盟){_CJK}{{2,7}}(?:区|县|旗|市)"
    rf"(?:{_CJK}{{1,12}}?(?:路|街|道|巷|弄|里|村|镇)(?:\d{{1,5}}|[一二三四五六七八九十百]{{1,4}})?号?)?"
    r"(?:\d{1,5}(?:号楼|号|栋|幢|单元|室|楼)){0,4}"
)
# 建国路88号, 南京东路100号3栋201室: a road or street name and its number.
_CN_STREET = re.compile(
    rf"{_CJK}{{1,12}}?(?:路|街|大道|巷|弄)(?:\d{{1,5}}|[一二三四五六七八九十百]{{1,4}})号"
    r"(?:\d{1,5}(?:号楼|号|栋|幢|单元|室|楼)){0,4}"
)
_EN_STREET = re.compile(
    r"\b\d{1,6}[A-Za-z]?\s+(?:[A-Z][A-Za-z'.-]{0,30}\s+){1,4}"
    r"(?i:street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|way|court|ct|place|pl|terrace|highway|hwy)"
    r"\b\.?(?:,?\s*(?i:apt|suite|unit|#)\s*\.?\s*[A-Za-z0-9-]{1,8})?"
)


def luhn_valid(digits: str) -> bool:
    """True when a string of digits passes the Luhn checksum that every payment card number carries."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(match: re.Match) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    if 13 <= len(digits) <= 19 and luhn_valid(digits):
        return CARD
    return match.group(0)


def mask(text: str) -> str:
    """The message with every piece of personal data replaced by its placeholder (see the module docstring)."""
    text = _EMAIL.sub(EMAIL, text)
    text = _ORDER.sub(lambda m: f"{m.group(1)}{m.group(2)}{ORDER}", text)
    # Identity numbers and phones first: their digit runs can pass Luhn by chance (one in ten), a card's can't be them.
    text = _CN_ID.sub(ID_NUMBER, text)
    text = _CN_MOBILE.sub(PHONE, text)
    text = _INTL_PHONE.sub(PHONE, text)
    text = _CARD.sub(_card, text)
    text = _CN_REGION.sub(ADDRESS, text)
    text = _CN_STREET.sub(ADDRESS, text)
    text = _EN_STREET.sub(ADDRESS, text)
    # Whatever long number is left (an order number without its keyword, a bank account, a parcel code) goes too.
    return _LONG_DIGITS.sub(NUMBER, text)


def with_stand_ins(text: str) -> str:
    """A masked message with each placeholder replaced by a fictitious value of its kind (STAND_INS)."""
    address = ADDRESS_STAND_INS["zh" if re.search(_CJK, text) else "en"]
    return _PLACEHOLDER.sub(lambda m: STAND_INS.get(m.group(0), address), text)
