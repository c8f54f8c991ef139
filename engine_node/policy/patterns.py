"""Strict-tier patterns, compiled with RE2: a match costs time linear in the text, whatever the pattern.

Python's `re` backtracks: `\\d+(?:\\.\\d{1,2})?\\s?元` takes half a second on 4,000 digits, `(a|a)+$` over a second on
23 characters. RE2 (google-re2) runs in linear time and refuses what it cannot run that way (backreferences,
look-around). Templates were written for Python's `re`, so before RE2 sees a pattern its Perl classes are given
Python's Unicode meaning: `\\d` is any decimal digit (full-width １２９９ too), `\\s` any Unicode space (the
ideographic space U+3000 too), `\\w` any letter, digit or `_` (Chinese characters too). Linear is not enough: RE2's
cost per byte depends on the pattern, so a pattern whose search automaton would be too large is refused too
(engine_node/policy/pattern_cost.py). See docs/policy-patterns.md.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import re2

from engine_node.policy.pattern_cost import (
    MAX_PROGRAM,
    Cost,
    TooCostly,
    check_program,
    check_template,
    estimate,
    program_too_large,
)
from engine_node.policy.pattern_syntax import DIGIT, SPACE, WORD

# Python's Unicode classes spelled for RE2 (a test compares them with `re` over every assigned code point).
_DIGIT, _SPACE, _WORD = DIGIT, SPACE, WORD
_OUTSIDE = {
    "d": _DIGIT,
    "D": r"\P{Nd}",
    "s": f"[{_SPACE}]",
    "S": f"[^{_SPACE}]",
    "w": f"[{_WORD}]",
    "W": f"[^{_WORD}]",
    "Z": r"\z",  # Python's end of text; RE2 spells it \z and refuses \Z
}
_INSIDE = {"d": _DIGIT, "D": r"\P{Nd}", "s": _SPACE, "w": _WORD}
# One compiled pattern's memory, program and lazily built DFA states together. Less makes RE2 leave its DFA for its
# far slower NFA sooner: with 8 MiB, `\w{1,20}x` ran out of memory backwards on every match (31 ms a search, 36 us
# with 32 MiB). The cost bound keeps accepted patterns' states well inside this; RE2 allocates only what it builds.
MAX_MEM = 32 << 20
# RE2's first look at a pattern, which also stops compiling a program well past MAX_PROGRAM (a program of 1.3 million
# instructions, `\w{1000}`, takes seconds to compile; RE2 gives up on it at ~32,000 here, in milliseconds).
_CHECK_OPTIONS = re2.Options()
_CHECK_OPTIONS.log_errors = False
_CHECK_OPTIONS.max_mem = MAX_PROGRAM * 32
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = MAX_MEM
# Searches report only where a match is: RE2 then finds it with its DFAs alone. With groups to fill it runs a second
# engine over the match, whose cost grows with the match and the pattern (`(\w+\d{0,50})元` took 4 ms on 4,000 digits).
_FINDER_OPTIONS = re2.Options()
_FINDER_OPTIONS.log_errors = False
_FINDER_OPTIONS.max_mem = MAX_MEM
_FINDER_OPTIONS.never_capture = True
# The group whose text a strict hit reports, when a pattern names one (the whole match otherwise). It is read on
# matches of at most HIT_SPAN_BYTES (a phone or ID number with a character around it is ~20) of patterns of at most
# HIT_PROGRAM instructions (RE2 then fills groups by backtracking over a bitmap of program x text, <= 256 Kbit): a
# longer match, or a larger pattern, is reported whole, so that filling the group costs a few microseconds.
HIT_GROUP = "hit"
HIT_SPAN_BYTES = 64
HIT_PROGRAM = 4096


class PatternRejected(ValueError):
    """A strict pattern RE2 cannot run; `field` names it (`temperature.strict_patterns[2]`)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def translate(pattern: str) -> str:
    """The RE2 spelling of a pattern written for Python's `re` (str patterns, Unicode classes)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            escaped = pattern[i + 1]
            if escaped == "Q":  # RE2's literal text up to \E: copied as it is
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end + 2
                out.append(pattern[i:end])
                i = end
                continue
            if escaped in "uU":
                width = 4 if escaped == "u" else 8
                digits = pattern[i + 2 : i + 2 + width]
                if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise ValueError(f"\\{escaped} needs {width} hex digits")
                out.append(f"\\x{{{digits}}}")
                i += 2 + width
                continue
            table = _INSIDE if in_class else _OUTSIDE
            if escaped in table:
                out.append(table[escaped])
            elif in_class and escaped in "SW":
                raise ValueError(f"\\{escaped} inside [...] has no RE2 equivalent; write a negated class [^...]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if char == "[" and pattern.startswith("[:", i):  # a POSIX class such as [:alpha:] inside a class
                end = pattern.find(":]", i + 2)
                if end >= 0:
                    out.append(pattern[i : end + 2])
                    i = end + 2
                    continue
            if char == "]":
                in_class = False
            out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ] is a literal
                out.append("]")
                i += 1
            continue
        if char == "{" and pattern.startswith("{,", i):  # Python's {,n} is {0,n}; RE2 would read it as text
            out.append("{0")
            i += 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def compile_pattern(pattern: str, field: str, *, bounded: bool = True) -> re2._Regexp:
    """The RE2 program of one strict pattern, or PatternRejected naming `field` and why: RE2 refused it, or (unless
    `bounded` is false) its cost is not bounded (engine_node.policy.pattern_cost)."""
    _compile(pattern, field, _CHECK_OPTIONS)
    regexp = _compile(pattern, field, _OPTIONS)
    if bounded:
        pattern_cost(pattern, field)
    return regexp


def pattern_cost(pattern: str, field: str) -> Cost:
    """What the pattern costs RE2 (engine_node.policy.pattern_cost), or PatternRejected naming `field`."""
    try:
        program = _compile(pattern, field, _CHECK_OPTIONS).programsize
        check_program(program)
        return replace(estimate(pattern), program=program)
    except TooCostly as exc:
        raise PatternRejected(field, str(exc)) from None


def _compile(pattern: str, field: str, options: re2.Options) -> re2._Regexp:
    if not isinstance(pattern, str) or not pattern:
        raise PatternRejected(field, "must be a non-empty string")
    try:
        return re2.compile(translate(pattern), options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        if "too large" in reason:
            raise PatternRejected(field, program_too_large(None)) from None
        message = f"is not a valid regular expression: {reason}{_hint(reason)}"
        raise PatternRejected(field, message) from None
    except ValueError as exc:  # from translate()
        raise PatternRejected(field, f"is not a valid regular expression: {exc}") from None


def _hint(reason: str) -> str:
    """Why RE2 refuses what Python's `re` accepts, for the constructs template authors meet."""
    if any(f"operator: {op}" in reason for op in ("(?=", "(?!", "(?<=", "(?<!")):
        return (
            " (strict patterns run on RE2, in linear time, which has no look-around: match the neighbour instead,"
            " e.g. (?:^|\\D) for (?<!\\d))"
        )
    if (reason.startswith("invalid escape sequence: \\") and reason[-1:].isdigit()) or "operator: (?P" in reason:
        return " (strict patterns run on RE2, in linear time, which has no backreferences)"
    return ""


class StrictPattern:
    """One compiled strict pattern; `search` reads UTF-8 bytes and returns the hit's text, or None."""

    __slots__ = ("_capture", "_regexp", "cost", "pattern")

    def __init__(self, pattern: str, field: str):
        self.pattern = pattern
        capture = _compile(pattern, field, _OPTIONS)
        self.cost = pattern_cost(pattern, field)
        self._regexp = _compile(pattern, field, _FINDER_OPTIONS)
        # RE2 compiles the reverse program (which finds where a match starts) on the first match; compiling it now
        # keeps that (up to ~20 ms for a large program) off the message that matches first.
        self._regexp.reverseprogramsize  # noqa: B018
        hit = HIT_GROUP in capture.groupindex and capture.programsize <= HIT_PROGRAM
        self._capture = capture if hit else None

    def search(self, data: bytes) -> str | None:
        found = self._regexp.search(data)
        if found is None:
            return None
        start, end = found.span()
        if self._capture is not None and end - start <= HIT_SPAN_BYTES:
            # The same match, anchored at both ends, with its groups: what RE2 itself does to fill them.
            groups = self._capture.fullmatch(data, start, end)
            if groups is not None and groups.group(HIT_GROUP):
                return groups.group(HIT_GROUP).decode("utf-8", "replace")
        return data[start:end].decode("utf-8", "replace")


def compile_patterns(patterns: object, field: str = "temperature.strict_patterns") -> list[StrictPattern]:
    """Every pattern of a template's list compiled, or PatternRejected naming the first refused one, or the list when
    its patterns together would cost too much."""
    if not isinstance(patterns, list):
        raise PatternRejected(field, "must be a list of regular expressions")
    compiled: list[StrictPattern] = []
    for index, pattern in enumerate(patterns):
        compiled.append(strict_pattern(pattern, f"{field}[{index}]"))
        try:
            check_template([strict.cost for strict in compiled])
        except TooCostly as exc:
            raise PatternRejected(field, str(exc)) from None
    return compiled


def strict_pattern(pattern: object, field: str) -> StrictPattern:
    """StrictPattern(pattern, field), compiled once per process: a policy is rebuilt at every config and bundle push
    (and the dashboard's explain builds one per request), and RE2 keeps the DFA states a pattern has built."""
    if not isinstance(pattern, str) or not pattern:
        raise PatternRejected(field, "must be a non-empty string")
    compiled = _strict_pattern(pattern)
    if isinstance(compiled, PatternRejected):
        raise PatternRejected(field, compiled.message)
    return compiled


@lru_cache(maxsize=256)
def _strict_pattern(pattern: str) -> StrictPattern | PatternRejected:
    try:
        return StrictPattern(pattern, "")
    except PatternRejected as exc:
        return exc
