"""How the masking pass reads a customer's text: a one-to-one character fold, Chinese numeral runs and IBAN lengths.

The fold keeps every character at its position (one character in, one out), so what the patterns find in the folded
text is replaced in the text as the customer typed it and everything else is shown unchanged. It maps a character
when Unicode's NFKC form of it is one ASCII character (fullwidth digits, letters, `＠`, `．`, `－`, U+3000 and the
other spaces, circled and mathematical digits), every other decimal digit to its ASCII digit, and the dashes to `-`.
NFKC of a whole text is not used: it turns one character into several (`½`, `㎏`) and would shift positions.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain

# Where NFKC lands a character on one ASCII character or a digit: Latin-1 and general punctuation (spaces,
# superscripts), letterlike and enclosed forms (①), CJK symbols (U+3000), small and fullwidth forms, mathematical
# alphanumerics, enclosed alphanumerics and segmented digits.
_FOLD_RANGES = (
    range(0x00A0, 0x0100),
    range(0x0660, 0x0670),
    range(0x06F0, 0x06FA),
    range(0x0966, 0x0970),
    range(0x2000, 0x2500),
    range(0x3000, 0x3001),
    range(0xFE50, 0xFE70),
    range(0xFF00, 0xFFF0),
    range(0x1D400, 0x1D800),
    range(0x1F100, 0x1F1FF),
    range(0x1FBF0, 0x1FBFA),
)
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"


def _fold_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in chain(*_FOLD_RANGES):
        char = chr(code)
        digit = unicodedata.decimal(char, None)
        folded = unicodedata.normalize("NFKC", char)
        if digit is not None:
            table[code] = str(digit)
        elif len(folded) == 1 and folded != char and folded.isascii() and folded.isprintable():
            table[code] = folded
    table.update({ord(dash): "-" for dash in _DASHES})
    return table


FOLD = _fold_table()

# 幺 is how "one" is read out in phone numbers; 两 is left out (a quantity, hardly ever a digit of a number).
_NUMERALS = "〇零一二三四五六七八九幺"
_NUMERAL_DIGITS = str.maketrans(_NUMERALS, "001234567891")
# Six or more numerals or digits in a row, a space, dot or dash allowed between them: a number read out in words
# (一三八零零一三八零零零). Shorter runs are words (一一对应, 五一) or dates (二〇二四年) and stay as they are.
_NUMERAL_RUN = re.compile(rf"[0-9{_NUMERALS}](?:[ .-]?[0-9{_NUMERALS}]){{5,}}")
_HAS_NUMERAL = re.compile(f"[{_NUMERALS}]")


def folded(text: str) -> str:
    """The text as the patterns read it: the same length, position for position, with digits and forms folded."""
    text = text.translate(FOLD)
    if not _HAS_NUMERAL.search(text):
        return text
    return _NUMERAL_RUN.sub(lambda m: m.group(0).translate(_NUMERAL_DIGITS), text)


# Each country's IBAN length (the SWIFT IBAN registry). A string of IBAN shape is an IBAN when its country and length
# agree, whether or not its check digits do: a mistyped IBAN is still someone's account.
IBAN_LENGTHS = {
    code: int(length)
    for code, length in re.findall(
        r"([A-Z]{2}):([0-9]{2})",
        "AD:24 AE:23 AL:28 AT:20 AZ:28 BA:20 BE:16 BG:22 BH:22 BI:27 BR:29 BY:28 CH:21 CR:22 CY:28 CZ:24 DE:22 "
        "DJ:27 DK:18 DO:28 EE:20 EG:29 ES:24 FI:18 FK:18 FO:18 FR:27 GB:22 GE:22 GI:23 GL:18 GR:27 GT:28 HR:21 "
        "HU:28 IE:22 IL:23 IQ:23 IS:26 IT:27 JO:30 KW:30 KZ:20 LB:28 LC:32 LI:21 LT:20 LU:20 LV:21 LY:25 MC:27 "
        "MD:24 ME:22 MK:19 MN:20 MR:27 MT:31 MU:30 NI:28 NL:18 NO:15 OM:23 PK:24 PL:28 PS:29 PT:25 QA:29 RO:24 "
        "RS:22 RU:33 SA:24 SC:31 SD:18 SE:24 SI:19 SK:24 SM:27 SO:23 ST:25 SV:28 TL:23 TN:24 TR:26 UA:29 VA:22 "
        "VG:24 XK:20 YE:30",
    )
}


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


def plausible_birth_date(digits: str) -> bool:
    """True when eight digits read as a date of birth, YYYYMMDD from 1900 (the middle of a Chinese ID number)."""
    year, month, day = int(digits[:4]), int(digits[4:6]), int(digits[6:8])
    return 1900 <= year <= 2099 and 1 <= month <= 12 and 1 <= day <= 31
