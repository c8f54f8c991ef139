"""Strict-tier patterns, compiled with RE2: a match costs time linear in the text, whatever the pattern.

Python's `re` backtracks: `\\d+(?:\\.\\d{1,2})?\\s?元` takes half a second on 4,000 digits, `(a|a)+$` over a second on
23 characters. RE2 (google-re2) runs in linear time and refuses what it cannot run that way (backreferences,
look-around). Templates were written for Python's `re`, so before RE2 sees a pattern its Perl classes are given
Python's Unicode meaning: `\\d` is any decimal digit (full-width １２９９ too), `\\s` any Unicode space (the
ideographic space U+3000 too), `\\w` any letter, digit or `_` (Chinese characters too). See docs/policy-patterns.md.
"""

from __future__ import annotations

import re2

# Python's Unicode classes spelled for RE2 (a test compares them with `re` over every assigned code point).
_DIGIT = r"\p{Nd}"
_SPACE = r"\t\n\x0b\f\r\x1c-\x1f \x{85}\p{Z}"
_WORD = r"\p{L}\p{N}_"
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
# One compiled pattern's memory, program and lazily built DFA together (RE2's default). Less makes RE2 leave its
# DFA for its slower NFA sooner: `(?:😀|😁)*😀(?:😀|😁){12}c` took 8 ms over 4,096 emoji with 2 MiB, 0.08 ms with
# 8 MiB. A pattern whose program does not fit (e.g. `\w{1000}`) is refused at validation rather than on a node.
MAX_MEM = 8 << 20
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = MAX_MEM
# The group whose text a strict hit reports, when a pattern names one (the whole match otherwise).
HIT_GROUP = "hit"


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


def compile_pattern(pattern: str, field: str) -> re2._Regexp:
    """The RE2 program of one strict pattern, or PatternRejected naming `field` and what RE2 refused."""
    if not isinstance(pattern, str) or not pattern:
        raise PatternRejected(field, "must be a non-empty string")
    try:
        return re2.compile(translate(pattern), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
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
    if "too large" in reason:
        return f" (its compiled form exceeds {MAX_MEM >> 20} MiB: use a smaller repetition count or character class)"
    return ""


class StrictPattern:
    """One compiled strict pattern; `search` reads UTF-8 bytes and returns the hit's text, or None."""

    __slots__ = ("_group", "_regexp", "pattern")

    def __init__(self, pattern: str, field: str):
        self.pattern = pattern
        self._regexp = compile_pattern(pattern, field)
        self._group = self._regexp.groupindex.get(HIT_GROUP, 0)

    def search(self, data: bytes) -> str | None:
        found = self._regexp.search(data)
        if found is None:
            return None
        text = found.group(self._group) or found.group(0)
        return text.decode("utf-8", "replace")


def compile_patterns(patterns: object, field: str = "temperature.strict_patterns") -> list[StrictPattern]:
    """Every pattern of a template's list compiled, or PatternRejected naming the first refused one."""
    if not isinstance(patterns, list):
        raise PatternRejected(field, "must be a list of regular expressions")
    return [StrictPattern(pattern, f"{field}[{index}]") for index, pattern in enumerate(patterns)]
