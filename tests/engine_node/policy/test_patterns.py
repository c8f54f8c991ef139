"""Strict patterns on RE2: Python's meaning of \\d \\s \\w kept, what RE2 cannot run refused with the field named."""

import re
import sys
import unicodedata

import pytest

from engine_node.policy.patterns import PatternRejected, StrictPattern, compile_pattern, compile_patterns, translate

FIELD = "temperature.strict_patterns[2]"


@pytest.fixture(scope="module")
def every_code_point() -> str:
    """Every code point both engines agree exists: assigned in Python's Unicode tables, not a surrogate."""
    return "".join(
        chr(cp)
        for cp in range(sys.maxunicode + 1)
        if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"
    )


@pytest.mark.parametrize(
    "pattern", [r"\d", r"\D", r"\s", r"\S", r"\w", r"\W", r"[\d]", r"[^\d]", r"[\s]", r"[\w]", r"[\D]", r"[x\d\s]"]
)
def test_perl_classes_match_what_python_s_re_matches_over_every_code_point(every_code_point, pattern):
    runs = f"(?:{pattern})+"  # runs rather than one match per character: the same set, far fewer objects
    python = set("".join(re.findall(runs, every_code_point)))
    compiled = compile_pattern(runs, FIELD)
    ours = set(b"".join(compiled.findall(every_code_point.encode("utf-8"))).decode("utf-8"))
    assert ours == python, [f"U+{ord(c):04X}" for c in sorted(ours ^ python)[:20]]


def test_full_width_digits_and_the_ideographic_space_count_as_python_counts_them():
    amount = StrictPattern(r"[¥￥]\s?\d+", FIELD)
    assert amount.search("付了￥　１２９９".encode()) == "￥　１２９９"
    assert StrictPattern(r"\w+", FIELD).search("订单_A1".encode()) == "订单_A1"


@pytest.mark.parametrize(
    ("python", "re2"),
    [
        (r"\d{,3}", r"\p{Nd}{0,3}"),  # Python's {,n}; RE2 would read it as text
        (r"end\Z", r"end\z"),
        (r"[\u4e00-\u9fff]+", r"[\x{4e00}-\x{9fff}]+"),
        (r"\U0001F600", r"\x{0001F600}"),
        (r"\\d", r"\\d"),  # an escaped backslash, then a letter
        (r"\Qa\d\E\d", r"\Qa\d\E\p{Nd}"),
        (r"[]\d]", r"[]\p{Nd}]"),
        (r"[^]\d]", r"[^]\p{Nd}]"),
        (r"[[:alpha:]\d]", r"[[:alpha:]\p{Nd}]"),
        (r"a{2,3}", r"a{2,3}"),
    ],
)
def test_translation(python, re2):
    assert translate(python) == re2


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "which has no backreferences"),
        (r"(?P<x>a)(?P=x)", "which has no backreferences"),
        (r"(?<!\d)1[3-9]\d{9}", "which has no look-around"),
        (r"\d{11}(?!\d)", "which has no look-around"),
        (r"(?=order)\w+", "which has no look-around"),
        (r"[\S]", r"\S inside [...] has no RE2 equivalent"),
        (r"[\w]{1000}", "exceeds 8 MiB"),
        (r"(unclosed", "missing )"),
        (r"\u4e0", r"\u needs 4 hex digits"),
        ("", "must be a non-empty string"),
    ],
)
def test_what_re2_cannot_run_is_refused_naming_the_field(pattern, reason):
    with pytest.raises(PatternRejected) as refused:
        compile_pattern(pattern, FIELD)
    assert refused.value.field == FIELD
    assert str(refused.value).startswith(f"{FIELD}: ")
    assert reason in refused.value.message


def test_a_list_names_the_index_of_the_first_refused_pattern():
    with pytest.raises(PatternRejected, match=r"^temperature\.strict_patterns\[1\]: .*look-around"):
        compile_patterns([r"\d+元", r"(?<=¥)\d+"])
    with pytest.raises(PatternRejected, match=r"^temperature\.strict_patterns: must be a list"):
        compile_patterns("\\d+")


def test_patterns_python_backtracks_on_are_accepted_and_answer_like_python():
    # (a|a)+$ is exponential for a backtracking engine, linear for RE2: nothing to refuse.
    pattern = StrictPattern(r"(a|a)+$", FIELD)
    assert pattern.search(b"a" * 4096 + b"!") is None
    assert pattern.search(b"b" + b"a" * 4096) == "a" * 4096  # a pattern reports its whole match...
    pattern = StrictPattern(r"x(?P<hit>\d+)y", FIELD)
    assert pattern.search(b"x123y") == "123"  # ...or its group named `hit`


def test_invalid_utf8_from_a_lone_surrogate_is_text_not_an_error():
    pattern = StrictPattern(r"\d+", FIELD)
    assert pattern.search("\ud800 12 \udfff".encode("utf-8", "surrogatepass")) == "12"
