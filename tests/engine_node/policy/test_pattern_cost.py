"""The cost bound of strict patterns: what makes RE2 slow is refused, the same way on every machine at any load;
what templates really use (amounts, order numbers, phone and ID numbers, emails, bank cards, addresses in Chinese and
English) is accepted. bench/policy_hostile.py measures what the accepted patterns cost at the limits."""

import itertools
import re

import pytest

from engine_node.policy import pattern_cost
from engine_node.policy.pattern_cost import MAX_TEMPLATE_UNITS, MAX_UNITS, estimate
from engine_node.policy.pattern_walk import costly_text
from engine_node.policy.patterns import (
    HIT_SPAN_BYTES,
    PatternRejected,
    StrictPattern,
    compile_pattern,
    compile_patterns,
)
from engine_node.policy.patterns import (
    pattern_cost as priced,
)
from engine_node.policy.rules import DEFAULT_STRICT_PATTERNS

FIELD = "temperature.strict_patterns[3]"
REALISTIC = {
    "amounts": [
        r"[¥￥]\s*\d{1,3}(?:,\d{3})*(?:\.\d{1,2})?",
        r"\d+(?:\.\d+)?\s*(?:元|块钱|块|角|分|万元|亿元)",
        r"(?i)(?:USD|EUR|GBP|JPY|CNY|RMB|HKD)\s?\d{1,3}(?:[,\s]?\d{3})*(?:\.\d{2})?",
        r"(?i)\$\s?\d{1,3}(?:,\d{3})*(?:\.\d{2})?|\d+(?:\.\d{2})?\s?(?:dollars?|usd|eur|euros?)",
        r"(?:人民币|金额|总价|合计|实付|应付)[:：]?\s*[¥￥]?\s*\d+(?:\.\d{1,2})?",
        r"[一二三四五六七八九十百千万亿零两]+(?:元|块)",
    ],
    "order numbers": [
        r"\b[A-Z]{2}\d{9}[A-Z]{2}\b",
        r"(?i)\b(?:SF|YT|ZTO|JD|STO|YD)\d{10,15}\b",
        r"(?:订单|单号|快递单号|运单号)[:：\s]*[A-Za-z0-9]{8,24}",
        r"\bDD\d{14,18}\b",
        r"(?i)(?:发票号码?|invoice\s+no\.?)\s*[:：]?\s*\d{8,20}",
        r"(?i)(?:tracking|waybill)\s*(?:no\.?|number|#)?\s*[:：]?\s*[A-Z0-9]{10,22}",
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    ],
    "phone and ID numbers": [
        r"(?:^|\D)(?P<hit>(?:\+?86[-\s]?)?1[3-9]\d{9})(?:\D|$)",
        r"(?:\+?86)?\s?1[3-9]\d[\s-]?\d{4}[\s-]?\d{4}",
        r"0\d{2,3}-?\d{7,8}",
        r"(?:\(\d{3}\)\s?|\d{3}[-.\s])\d{3}[-.\s]\d{4}",
        r"\+\d{1,3}[\s-]?\d{1,4}[\s-]?\d{3,4}[\s-]?\d{3,4}",
        r"(?:^|\D)[1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?:\D|$)",
        r"(?:身份证|证件)号?码?[:：]?\s*\d{15}(?:\d{2}[\dXx])?",
        r"(?i)\b[A-Z]\d{8}\b|护照号?[:：]?\s*[A-Z0-9]{8,9}",
        r"[京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼][A-Z][A-Z0-9]{5,6}",
    ],
    "emails and links": [
        r"[\w.+-]+@[\w-]+\.[\w.-]+",
        r"(?i)\b[A-Z0-9._%+-]+@[A-Z0-9.-]+\.[A-Z]{2,}\b",
        r"https?://[^\s/$.?#].[^\s]*",
    ],
    "bank cards": [
        r"(?:^|\D)(?P<hit>\d{4}[ -]?\d{4}[ -]?\d{4}[ -]?\d{4}(?:\d{3})?)(?:\D|$)",
        r"(?:^|\D)(?:4\d{3}|5[1-5]\d{2}|6\d{3}|3[47]\d{2})[\s-]?\d{4}[\s-]?\d{4}[\s-]?\d{2,4}(?:\D|$)",
        r"\b(?:4[0-9]{3}|5[1-5][0-9]{2}|6[0-9]{3}|3[47][0-9]{2})[\s-]?[0-9]{4}[\s-]?[0-9]{4}[\s-]?[0-9]{2,4}\b",
        r"(?:^|\D)62\d{14,17}(?:\D|$)",
        r"(?:银行卡|卡号|账号)[:：]?\s*\d{12,19}",
        r"(?i)\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b",
        r"(?:支付宝|微信)(?:账号|号)?[:：]?\s*\S{4,30}",
    ],
    "addresses": [
        r"[\u4e00-\u9fa5]{2,6}(?:省|自治区)[\u4e00-\u9fa5]{2,8}(?:市|州|盟)",
        r"\p{Han}{2,6}(?:省|自治区)\p{Han}{2,8}(?:市|州|盟)",
        r"\p{Han}+(?:省|市)\p{Han}+(?:市|区|县)\p{Han}+(?:路|街|道|巷)\d+号",
        r"\p{Han}{2,10}(?:路|街|大道)\d{1,5}号(?:\d{1,4}(?:室|楼|栋|单元))*",
        r"(?:收货地址|地址|收件人)[:：]\s*\S{2,60}",
        r"(?i)\b\d{1,5}\s+(?:[A-Z][a-z]+\s){1,4}(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr)\b\.?",
        r"(?i)\b(?:apt|apartment|suite|unit)\s*#?\s*\w{1,6}\b",
        r"\b\d{5}(?:-\d{4})?\b",
        r"\b[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2}\b",
    ],
    "dates and keywords": [
        r"\d{4}[-/年]\d{1,2}[-/月]\d{1,2}日?",
        r"(?i)\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2},?\s+\d{4}\b",
        r"(?:合同|协议|条款|法律|律师|起诉|仲裁)",
        r"(?:验证码|密码|口令)[:：]?\s*\d{4,8}",
    ],
}
ALL_REALISTIC = [pattern for patterns in REALISTIC.values() for pattern in patterns]
# (pattern, what the refusal names): the cases that showed linear time is not enough, and realistic-looking
# patterns that are as costly (bench/policy_hostile.py times them).
COSTLY = {
    "{24} after a loop": (r"(?:😀|😁)*😀(?:😀|😁){24}c", "(its counted repeats: {24})"),
    "{32} after a loop": (r"(?:😀|😁)*😀(?:😀|😁){32}c", "(its counted repeats: {32})"),
    "{60} after a loop": (r"(?:😀|😁)*😀(?:😀|😁){60}c", "(its counted repeats: {60})"),
    "nested counted repeats": (r"(?:\p{Han}{1,20}){1,50}c", "would have far more than 16,384 instructions"),
    "nested counted repeats of a small class": (
        r"(?:[a-z]{1,20}){1,50}c",
        "repeats ({1,50}, {1,20}) expand to more than 250",
    ),
    "written out": ("[ab]*a" + "[ab]" * 24 + "c", "partial match that can start at each character"),
    "bounded address parts": (
        r"[\u4e00-\u9fa5]{2,10}(?:省|市)[\u4e00-\u9fa5]{2,10}(?:市|区|县)[\u4e00-\u9fa5]{2,20}(?:路|街|道|巷)\d+号",
        "(its counted repeats: {2,10}, {2,20})",
    ),
    "\\w for Chinese": (r"\w{2,6}(?:省|自治区)\w{2,8}(?:市|州|盟)", "has 18,836 instructions, more than 16,384"),
    "\\S for Chinese": (r"\S{2,10}(?:省|自治区)\S{2,10}(?:市|州|盟)", "use narrower classes than \\w and \\S"),
    "\\b next to \\d": (r"\b(?:4\d{3}|5[1-5]\d{2})[\s-]?\d{4}[\s-]?\d{4}[\s-]?\d{2,4}\b", "(?:^|\\D) before digits"),
    "a large program": (r"\w{13}", "RE2's program for it has 17,463 instructions, more than 16,384"),
}


@pytest.mark.parametrize("pattern", DEFAULT_STRICT_PATTERNS + ALL_REALISTIC)
def test_shipped_and_realistic_patterns_are_accepted(pattern):
    cost = priced(pattern, FIELD)
    assert cost.units <= MAX_UNITS
    compile_pattern(pattern, FIELD)


def test_realistic_patterns_fit_in_one_template_and_the_shipped_ones_cost_little():
    patterns = DEFAULT_STRICT_PATTERNS + ALL_REALISTIC
    assert len(patterns) <= 64
    compiled = compile_patterns(patterns)
    assert sum(strict.cost.units for strict in compiled) <= MAX_TEMPLATE_UNITS
    assert max(priced(pattern, FIELD).units for pattern in DEFAULT_STRICT_PATTERNS) < MAX_UNITS / 20


@pytest.mark.parametrize(("pattern", "named"), COSTLY.values(), ids=COSTLY.keys())
def test_costly_patterns_are_refused_naming_the_field_and_why(pattern, named):
    with pytest.raises(PatternRejected) as refused:
        compile_pattern(pattern, FIELD)
    assert refused.value.field == FIELD
    assert str(refused.value).startswith(f"{FIELD}: too costly to ")
    assert named in refused.value.message
    with pytest.raises(PatternRejected):  # the gateway's own compilation refuses the same
        StrictPattern(pattern, FIELD)


def test_the_count_doubles_with_each_repeat_a_search_must_track():
    # [ab]*a[ab]{k}c: a DFA must remember which of the last k+1 characters were an `a`, 2^(k+1) states. The count
    # follows that, so the bound is about the pattern's shape, not about a clock.
    states = [estimate(f"[ab]*a[ab]{{{k}}}c").states for k in range(5, 9)]
    assert all(1.85 < later / earlier < 2.1 for earlier, later in itertools.pairwise(states)), states
    # The same repeat after something it cannot match starts one partial match at a time: no growth.
    linear = [estimate(f"\\d*1[a-z]{{{k}}}c").states for k in range(2, 7)]
    assert linear[-1] - linear[0] < 20, linear


@pytest.mark.parametrize(
    ("costly", "cheap"),
    [
        (r"[a-z1]*1[a-z1]{12}c", r"\d*1[a-z]{12}c"),  # the repeat cannot match what starts it
        (r"\p{Han}*中\p{Han}{12}c", r"x\p{Han}{12}c"),  # \p{Han} read as the class it is
        (COSTLY["bounded address parts"][0], r"\p{Han}+(?:省|市)\p{Han}+(?:市|区|县)\p{Han}+(?:路|街|道|巷)\d+号"),
    ],
)
def test_what_the_advice_says_makes_a_pattern_cheap(costly, cheap):
    with pytest.raises(pattern_cost.TooCostly):
        estimate(costly)
    assert estimate(cheap).units < MAX_UNITS / 10


def test_a_template_whose_patterns_add_up_to_too_much_is_refused_naming_the_list():
    heavy = [f"(?:[ab]*a[ab]{{9}}c){'y' * i}" for i in range(12)]
    assert all(estimate(pattern).units <= MAX_UNITS for pattern in heavy)
    with pytest.raises(PatternRejected) as refused:
        compile_patterns([r"\d+元", *heavy])
    assert refused.value.field == "temperature.strict_patterns"
    assert refused.value.message.startswith("too costly to run on every message together: RE2's automata")
    assert f"more than {MAX_TEMPLATE_UNITS:,}" in refused.value.message


def test_huge_programs_are_refused_before_re2_spends_seconds_compiling_them():
    with pytest.raises(PatternRejected, match="would have far more than 16,384 instructions"):
        compile_pattern(r"[\w]{1000}", FIELD)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\x{4e00}\Q.*\E[[:alpha:]]\pN(?i)ab(?U)c+(?<name>d)",  # RE2-only syntax, mid-pattern flags
        r"(?i)abc(?-i:D)e",
        r"(?m)^订单\d+$",
        r"\P{Han}+\p{Greek}\B\A",
    ],
)
def test_re2_syntax_python_does_not_read_is_estimated_too(pattern):
    assert estimate(pattern).units > 0


def test_a_hit_group_is_read_on_short_matches_and_other_groups_cost_nothing():
    phone = StrictPattern(r"(?:^|\D)(?P<hit>1[3-9]\d{9})(?:\D|$)", FIELD)
    assert phone.search("手机13812345678。".encode()) == "13812345678"
    long = StrictPattern(r"x(?P<hit>\d+)y", FIELD)
    assert long.search(b"x123y") == "123"
    digits = b"x" + b"1" * HIT_SPAN_BYTES + b"y"
    assert long.search(digits) == digits.decode()  # too long to read the group in: the whole match
    groups = StrictPattern(r"(\w+\d{0,50})元", FIELD)  # took 4 ms a message when RE2 filled the group
    assert groups.search(b"1" * 4000 + "元".encode()) == "1" * 4000 + "元"


def test_the_costly_text_walks_new_states_without_a_match():
    pattern = r"[ab]*a[ab]{8}c"
    text = costly_text(pattern)
    assert len(text) == pattern_cost.SCAN_CHARS
    assert re.search(pattern, text) is None
    assert len({text[i : i + 9] for i in range(len(text) - 9)}) > 400  # most of the 512 windows a DFA tells apart
