"""Strict patterns whose RE2 automaton is large, timed for bench/policy_hostile.py (which prints them in the same run
as its baseline): the patterns the cost bound refuses (engine_node/policy/pattern_cost.py), the costliest it accepts,
and a template at its limits.

Each pattern is timed on the text that walks its DFA through the most new states (`costly_text`), or on a text that
makes it match far from where its match starts (RE2 then builds its reverse DFA): cold is the first search after
compiling, best of 3 fresh compilations (RE2 builds every state the text reaches), warm the same search again.
"""

from __future__ import annotations

import math
import random
import time

import re2

from controlplane.params import schema
from engine_node.policy import pattern_cost
from engine_node.policy.pattern_walk import costly_text as walk
from engine_node.policy.patterns import MAX_MEM, StrictPattern, compile_pattern, translate
from engine_node.policy.patterns import pattern_cost as priced
from engine_node.policy.rules import REGEX_EDGE_CHARS, Policy, edges

ADDRESS = r"(?:收货地址|地址|收件人)[:：]\s*\S{2,60}"
# What a node searches with (engine_node.policy.patterns.StrictPattern), here for refused patterns too.
FINDER = re2.Options()
FINDER.max_mem = MAX_MEM
FINDER.never_capture = True
FINDER.log_errors = False
# (pattern, text or None for its costly text). Before None: refused; after it: accepted, the costliest found.
CASES = [
    (r"(?:😀|😁)*😀(?:😀|😁){24}c", None),
    (r"(?:😀|😁)*😀(?:😀|😁){32}c", None),
    (r"(?:😀|😁)*😀(?:😀|😁){60}c", None),
    (r"(?:\p{Han}{1,20}){1,50}c", None),
    (r"[\u4e00-\u9fa5]{2,10}(?:省|市)[\u4e00-\u9fa5]{2,10}(?:市|区|县)[\u4e00-\u9fa5]{2,20}(?:路|街|道|巷)\d+号", None),
    (r"\w{2,6}(?:省|自治区)\w{2,8}(?:市|州|盟)", None),
    (r"\b(?:4\d{3}|5[1-5]\d{2}|6\d{3}|3[47]\d{2})[\s-]?\d{4}[\s-]?\d{4}[\s-]?\d{2,4}\b", None),
    (r"\w{1,30}x", "🯹" * 2000 + "x"),
    None,
    (r"[ab]*a[ab]{10}c", None),
    (r"(?:😀|😁)*😀(?:😀|😁){10}c", None),
    (r"\d*1\d{9}c", None),
    (r"\p{Han}*中\p{Han}{9}c", None),
    (r"[\w😀]*😀[\w😀]{6}c", None),
    (r"\w{1,12}x", "𠀀" * 2000 + "x"),
    (r".{1,160}x", None),
    (r"\S{2,110}x", "🯹" * 2000 + "x"),
    (ADDRESS, ("地址：" + "🯹" * 60 + " ") * 60),
    (r"\p{Han}{2,8}(?:省|自治区)\p{Han}{2,8}(?:市|州|盟)", None),
    (r"[\u4e00-\u9fa5]{2,10}(?:省|市)[\u4e00-\u9fa5]{2,10}(?:市|区|县)", None),
    (r"0\d{2,3}-?\d{7,8}", None),
    (r"(?i)(?:tracking|waybill)\s*(?:no\.?|number|#)?\s*[:：]?\s*[A-Z0-9]{10,22}", None),
]


def costly_text(pattern: str) -> str:
    try:
        return walk(pattern)
    except pattern_cost.TooCostly:  # too many positions to even count them: random characters of its class
        rng = random.Random(1)
        return "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(pattern_cost.SCAN_CHARS))


def best_us(func, runs: int) -> float:
    best = math.inf
    for _ in range(runs):
        started = time.perf_counter_ns()
        func()
        best = min(best, time.perf_counter_ns() - started)
    return best / 1000


def search_us(pattern: str, data: bytes) -> tuple[float, float]:
    """(cold, warm): the first search after compiling, best of 3 fresh compilations; the same search again."""
    cold = warm = math.inf
    for _ in range(3):
        re2.purge()  # re2.compile caches compiled patterns, and with them the states they built
        compiled = re2.compile(translate(pattern), FINDER)
        compiled.reverseprogramsize  # noqa: B018  (compiled with the pattern, as StrictPattern does)
        cold = min(cold, best_us(lambda compiled=compiled: compiled.search(data), 1))
        warm = min(warm, best_us(lambda compiled=compiled: compiled.search(data), 5))
    return cold, warm


def measure() -> list[tuple | None]:
    rows = []
    for case in CASES:
        if case is None:
            rows.append(None)
            continue
        pattern, text = case
        try:
            cost = priced(pattern, "bench")
        except ValueError:
            cost = None
        data = edges(text or costly_text(pattern), REGEX_EDGE_CHARS).encode()
        rows.append((pattern, cost, len(data), *search_us(pattern, data)))
    return rows


def groups() -> tuple[float, float]:
    """A group other than `hit` over a long match, warm: before (RE2 filled every group) and after (never_capture)."""
    pattern, data = r"(\w+\d{0,50})元", ("1" * 4000 + "元").encode()
    before = compile_pattern(pattern, "bench")
    after = StrictPattern(pattern, "bench")
    before.search(data), after.search(data)
    return best_us(lambda: before.search(data), 5), best_us(lambda: after.search(data), 5)


def template_at_limits(heavy: bool) -> list[str]:
    """The shipped patterns, then (`heavy`) the costliest accepted ones, each made distinct so that RE2 builds each
    one's states apart, while the template's budget allows, then cheap ones up to 64 patterns."""
    patterns = list(schema.DEFAULT_STRICT_PATTERNS)
    costs = [priced(p, "bench") for p in patterns]
    costliest = [pattern for pattern, _text in CASES[CASES.index(None) + 1 :]] if heavy else []
    candidates = [f"(?:{pattern}){'y' * round_}" for round_ in range(4) for pattern in costliest]
    candidates += [f"(?:单号|編號){number:02d}[:：]?\\s*\\d{{6,20}}" for number in range(64)]
    for candidate in candidates:
        if len(patterns) == schema.MAX_PATTERNS:
            break
        try:
            cost = priced(candidate, "bench")
            pattern_cost.check_template([*costs, cost])
        except (ValueError, pattern_cost.TooCostly):
            continue
        patterns.append(candidate)
        costs.append(cost)
    return patterns


def template_costs(hostile: dict[str, str], *, heavy: bool) -> dict:
    patterns = template_at_limits(heavy)
    params = {"temperature": {"strict_patterns": patterns}}
    texts = list(dict.fromkeys([costly_text(p) for p in patterns] + list(hostile.values())[:-1]))
    texts.append(("地址：" + "🯹" * 60 + " ") * 60)
    cold_each = 0.0
    for pattern in patterns:  # each pattern on its own worst text: what no single message can add up to
        cold_each += search_us(pattern, edges(costly_text(pattern), REGEX_EDGE_CHARS).encode())[0]
    cold = 0.0
    for text in texts:  # a freshly configured node: one message against every pattern, no state built yet
        best = math.inf
        for _ in range(2):
            re2.purge()  # and new StrictPatterns (a policy reuses those compiled before): nothing built yet
            policy = Policy(params)
            policy.patterns = [StrictPattern(pattern, "bench") for pattern in patterns]
            best = min(best, best_us(lambda policy=policy, text=text: policy.strict_hits(text), 1))
        cold = max(cold, best)
    policy = Policy(params)
    for text in texts:
        policy.strict_hits(text)
    warm = max(best_us(lambda text=text: policy.strict_hits(text), 5) for text in texts)
    return {
        "patterns": len(patterns),
        "units": sum(strict.cost.units for strict in policy.patterns),
        "program": sum(strict.cost.program for strict in policy.patterns),
        "texts": len(texts),
        "cold_each": cold_each,
        "cold": cold,
        "warm": warm,
    }


def report(rows: list, templates: list[dict], grouped: tuple[float, float], base: float) -> None:
    print("\nstrict patterns with large RE2 automata, each on the text that walks its DFA through the most new states")
    print("or that makes it match far from where the match starts (cold: first search after compiling; warm: the same")
    print(
        f"again; units: the cost bound's count, at most {pattern_cost.MAX_UNITS:,} a pattern; ns/unit: cold per unit)"
    )
    print(f"{'refused:':<58} {'units':>10} {'bytes':>6} {'cold':>10} {'warm':>9} {'cold/baseline':>14} {'ns/unit':>8}")
    for row in rows:
        if row is None:
            print("accepted, the costliest found:")
            continue
        pattern, cost, size, cold, warm = row
        units = "refused" if cost is None else f"{cost.units:,}"
        per_unit = "" if cost is None else f"{cold * 1000 / cost.units:.2f}"
        shown = pattern if len(pattern) <= 56 else pattern[:53] + "..."
        print(
            f"  {shown:<56} {units:>10} {size:>6} {cold / 1000:>7.2f} ms {warm:>6.1f} us {cold / base:>13.0f}x "
            f"{per_unit:>8}"
        )
    before, after = grouped
    print(
        f"  a group filled over a 4,001-character match, (\\w+\\d{{0,50}})元, warm: {before / 1000:.2f} ms when RE2 "
        f"filled it, {after:.1f} us finding the match only ({before / after:.0f}x)"
    )
    for t in templates:
        print(
            f"\na template at the limits: {t['patterns']} patterns, {t['units']:,} units (at most "
            f"{pattern_cost.MAX_TEMPLATE_UNITS:,}), {t['program']:,} instructions; Policy.strict_hits over "
            f"{t['texts']} hostile texts:"
        )
        for name, key in (
            ("the worst message, states built (steady state)", "warm"),
            ("the worst message on a freshly configured node", "cold"),
            ("every pattern cold on its own worst text, summed", "cold_each"),
        ):
            print(f"  {name:<56} {t[key] / 1000:>8.2f} ms {t[key] / base:>10.0f}x baseline")
