"""Replaces personal data in a customer's text with typed placeholders: the one masking pass, run before any cut.

The text is read folded (engine_node/policy/masking_text.py: fullwidth and other digits, `＠`, U+3000 and other spaces,
dashes, and runs of Chinese numerals, all one character for one), and each kind is found in turn, a later kind never
inside an earlier one's match:

- e-mail addresses, ASCII and internationalised (用户@例子.中国, a fullwidth `＠`);
- order numbers after an order keyword (the keyword stays: a reviewer sees what was asked about);
- Chinese resident ID numbers (18 characters, the last a digit or X, spaces or dashes allowed) whose middle reads
  as a date of birth, or that end in X; US social security numbers (123-45-6789, 123 45 6789);
- IBANs (a known country and its length, grouped or not; check digits not required);
- card numbers that look like one (Luhn passes, or groups of four, 4-6-5, 4-6-4), before phones so that a phone
  match cannot take part of a card;
- phone numbers: Google's libphonenumber (`phonenumbers`) over every run of seven or more digits, read as Chinese
  then as US numbers (+86 138 0013 8000, 0086-, 138.0013.8000, +1 (415) 555-0100, +44 20 7946 0958, (0755) 8888 6666),
  then the plain shapes of a Chinese mobile or an international number that the library finds invalid;
- any other 13-19 digits in groups (a card whatever its checksum), and seven or more digits in groups with one
  separator that are no date (a local landline, a bank account): <NUMBER>;
- street addresses (Chinese 省/市/区 chains and 路/街 ... 号 forms, English "123 Main St" forms);
- whatever run of six or more digits is left.

`mask(text, limit=n)` masks first and cuts after: the cut never splits a placeholder, and when the text is longer
than n + CONTEXT characters it reads only that much and keeps nothing from its last CONTEXT characters, where a piece
of data could have been cut in two. Every pattern is linear, and a text with no digit, `@` or address word costs
only the checks that find so.
"""

from __future__ import annotations

import re
import sys

from phonenumbers import Leniency, PhoneNumberMatcher

from engine_node.policy.masking_text import IBAN_LENGTHS, folded, luhn_valid, plausible_birth_date

EMAIL = "<EMAIL>"
CARD = "<CARD>"
ID_NUMBER = "<ID>"
SSN = "<SSN>"
IBAN = "<IBAN>"
PHONE = "<PHONE>"
ORDER = "<ORDER>"
NUMBER = "<NUMBER>"
ADDRESS = "<ADDRESS>"
PLACEHOLDERS = (EMAIL, CARD, ID_NUMBER, SSN, IBAN, PHONE, ORDER, NUMBER, ADDRESS)
# Fictitious values of each kind, put back before a masked message is classified or trained on: the classifier reads
# digit runs by length (an order number is "#order", a price "#num"), so a placeholder's own letters ("order",
# "phone") would teach it words the gateway never sees in live traffic. None of these is a real person's data.
STAND_INS = {
    EMAIL: "user@example.com",
    CARD: "4111111111111111",
    ID_NUMBER: "110101199001010000",
    SSN: "123-45-6789",
    IBAN: "GB82WEST12345698765432",
    PHONE: "13800000000",
    ORDER: "20240101000000",
    NUMBER: "123456",
}
ADDRESS_STAND_INS = {"zh": "北京市朝阳区建国路1号", "en": "1 Main St"}
# The longest piece of data the pass finds (an e-mail address of 64 + 1 + 6 x 64 characters) fits in this.
CONTEXT = 512
PHONE_REGIONS = ("CN", "US")
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))
_BLANK = "\x00"  # stands in the working text for what is already masked: no pattern matches it

# Every kind below needs a digit, an `@`, or (addresses) 市/州/盟 or 号: a text with none of them is left as it is.
_CHEAP_CHECK = re.compile(r"[\d@市州盟号]")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,5}")
# Internationalised: letters of any script (\w), after the ASCII form has taken what it can.
_EMAIL_IDN = re.compile(r"[\w.%+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,5}")
_ORDER = re.compile(
    r"(?i)(?:订单号?|单号|order\s*(?:no\.?|number|id|#)?|tracking\s*(?:no\.?|number)?)\s*[:：#]?\s*"
    r"((?=[A-Za-z0-9-]*[0-9])[A-Za-z0-9-]{6,40})"
)
_EDGE = r"(?<![0-9A-Za-z+])"
_END = r"(?![0-9A-Za-z])"
_CN_ID = re.compile(rf"{_EDGE}[0-9](?:[ -]?[0-9]){{16}}[ -]?[0-9Xx]{_END}")
_SSN = re.compile(r"(?<![0-9A-Za-z+.-])[0-9]{3}([ -])[0-9]{2}\1[0-9]{4}(?![0-9A-Za-z-]|\.[0-9])")
_IBAN = re.compile(rf"{_EDGE}[A-Za-z]{{2}}[0-9]{{2}}(?:[ ]?[0-9A-Za-z]{{4}}){{2,7}}(?:[ ]?[0-9A-Za-z]{{1,4}})?{_END}")
# 13-19 digits, alone or in groups split by one space, dot or dash.
_DIGIT_RUN = re.compile(rf"{_EDGE}[0-9](?:[ .-]?[0-9]){{12,18}}{_END}")
_CARD_GROUPS = re.compile(r"[0-9]{4}([ .-])[0-9]{4}\1[0-9]{4}(?:\1[0-9]{1,4}){0,2}|[0-9]{4}([ .-])[0-9]{6}\2[0-9]{4,5}")
# Where a phone number may be: seven or more digits with at most three separators between any two.
_PHONE_CANDIDATE = re.compile(r"[+(]?[0-9](?:[ ().\-/]{0,3}[0-9]){6,24}\)?")
_CN_MOBILE = re.compile(r"(?<![0-9])(?:(?:\+|00)?86[ .-]?)?1[3-9][0-9](?:[ .-]?[0-9]{4}){2}(?![0-9])")
_INTL_PHONE = re.compile(
    r"(?:\+[0-9]{1,3}[ .-]?|\([0-9]{2,5}\)[ .-]?)(?:\([0-9]{1,5}\)[ .-]?)?[0-9]{2,5}(?:[ .-]?[0-9]{2,5}){1,4}(?![0-9])"
)
# Digits in groups joined by one separator; seven digits or more and not a date make a number worth masking.
_GROUPED = re.compile(rf"{_EDGE}[0-9]{{1,6}}([ .-])[0-9]{{1,6}}(?:\1[0-9]{{1,6}}){{0,17}}{_END}")
_DATE = re.compile(r"[0-9]{4}([ .-])[0-9]{1,2}\1[0-9]{1,2}|[0-9]{1,2}([ .-])[0-9]{1,2}\2[0-9]{4}")
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


class _Pass:
    """The folded working text, and the spans found so far (start, end, placeholder), blanked in it as they are."""

    def __init__(self, text: str):
        self.work = folded(text)
        self.found: list[tuple[int, int, str]] = []

    def take(self, spans: list[tuple[int, int, str]]) -> None:
        if not spans:
            return
        pieces, at = [], 0
        for start, end, _kind in spans:
            pieces += (self.work[at:start], _BLANK * (end - start))
            at = end
        pieces.append(self.work[at:])
        self.work = "".join(pieces)
        self.found += spans

    def each(self, pattern: re.Pattern, kind, group: int = 0) -> None:
        """Mask every match of `pattern` as `kind`: a placeholder, or a function of the match giving one or None."""
        spans = []
        for match in pattern.finditer(self.work):
            placeholder = kind if isinstance(kind, str) else kind(match)
            if placeholder is not None:
                spans.append((match.start(group), match.end(group), placeholder))
        self.take(spans)


def _id_number(match: re.Match) -> str | None:
    compact = re.sub(r"[ -]", "", match.group(0))
    return ID_NUMBER if compact[-1] in "Xx" or plausible_birth_date(compact[6:14]) else None


def _iban(match: re.Match) -> str | None:
    compact = match.group(0).replace(" ", "").upper()
    return IBAN if compact[:2].isalpha() and IBAN_LENGTHS.get(compact[:2]) == len(compact) else None


def _card_shaped(match: re.Match) -> str | None:
    text = match.group(0)
    return CARD if luhn_valid(re.sub(r"[ .-]", "", text)) or _CARD_GROUPS.fullmatch(text) else None


def _grouped_number(match: re.Match) -> str | None:
    text = match.group(0)
    digits = sum(char.isdigit() for char in text)
    if digits >= 13:
        return CARD
    longest = max(len(group) for group in re.split(r"[ .-]", text))
    # "36 37 38 39 40" (sizes) stays; "1 3 8 0 0 1 3 8 0 0 0" (a number spelt out digit by digit) goes.
    if digits < 7 or _DATE.fullmatch(text) or longest == 2:
        return None
    return NUMBER


def _phones(state: _Pass) -> None:
    spans = []
    for candidate in _PHONE_CANDIDATE.finditer(state.work):
        piece, offset = candidate.group(0), candidate.start()
        digits = sum(char.isdigit() for char in piece)
        # No number is longer than 15 digits (E.164) plus an international prefix, and a date is none: longer runs
        # are left to the patterns below, which mask them whatever they are, and cost the library nothing.
        if digits > 17 or (digits == len(piece) and digits > 15) or _DATE.fullmatch(piece):
            continue
        for region in PHONE_REGIONS:
            matches = PhoneNumberMatcher(piece, region, Leniency.STRICT_GROUPING)
            hits = [(offset + m.start, offset + m.end, PHONE) for m in matches]
            if hits:
                spans += hits
                break
    state.take(spans)


def _spans(text: str) -> list[tuple[int, int, str]]:
    state = _Pass(text)
    state.each(_PLACEHOLDER, lambda m: m.group(0))  # already masked (a second pass): kept as it is
    if not _CHEAP_CHECK.search(state.work):
        return state.found
    if "@" in state.work:
        state.each(_EMAIL, EMAIL)
        state.each(_EMAIL_IDN, EMAIL)
    state.each(_ORDER, ORDER, group=1)
    state.each(_CN_ID, _id_number)
    state.each(_SSN, SSN)
    state.each(_IBAN, _iban)
    state.each(_DIGIT_RUN, _card_shaped)
    # A Chinese mobile number is the commonest by far: its plain shape first, the library for every other one.
    state.each(_CN_MOBILE, PHONE)
    _phones(state)
    state.each(_INTL_PHONE, PHONE)
    state.each(_GROUPED, _grouped_number)
    state.each(_CN_REGION, ADDRESS)
    state.each(_CN_STREET, ADDRESS)
    state.each(_EN_STREET, ADDRESS)
    # Whatever long number is left (an order number without its keyword, a parcel code) goes too.
    state.each(_LONG_DIGITS, NUMBER)
    return sorted(state.found)


def mask(text: str, *, limit: int | None = None) -> str:
    """The text with every piece of personal data replaced by its placeholder, then cut to at most `limit`
    characters (see the module docstring); masking a masked text changes nothing."""
    readable = len(text)
    if limit is not None and len(text) >= limit + CONTEXT:
        text = text[: limit + CONTEXT]
        readable = limit  # data cut in two by the line above starts after this
    pieces, at, size = [], 0, 0
    room = limit if limit is not None else sys.maxsize
    for start, end, placeholder in [*_spans(text), (len(text), len(text), "")]:
        plain = text[at : min(start, readable)]
        pieces.append(plain[: room - size])
        size += len(pieces[-1])
        if start >= readable or size + len(placeholder) > room:
            break
        pieces.append(placeholder)
        size += len(placeholder)
        at = end
    return "".join(pieces)


def with_stand_ins(text: str) -> str:
    """A masked message with each placeholder replaced by a fictitious value of its kind (STAND_INS)."""
    address = ADDRESS_STAND_INS["zh" if re.search(_CJK, text) else "en"]
    return _PLACEHOLDER.sub(lambda m: STAND_INS.get(m.group(0), address), text)
