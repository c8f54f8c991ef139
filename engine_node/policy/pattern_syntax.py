"""A strict pattern read for its cost: its parse tree and the characters each of its atoms matches.

Patterns are written in Python's syntax (RE2 extensions such as `\\p{Han}` allowed; see docs/policy-patterns.md), so
Python's own parser reads them once the few RE2-only constructs are mapped onto something it reads: a Unicode class
such as `\\p{Han}` becomes a private-use placeholder character whose set is read off RE2 itself, `\\x{4e00}` a code
point, `\\Q...\\E` its literal characters, a flag group in mid-pattern a flag of the whole pattern. Character sets are
sorted tuples of inclusive code point ranges.
"""

from __future__ import annotations

import re
import sys
import warnings
from array import array
from functools import lru_cache
from re import _constants as sre
from re import _parser as sre_parse

import re2

Ranges = tuple[tuple[int, int], ...]

ANY: Ranges = ((0, 0x10FFFF),)
NEWLINE: Ranges = ((10, 10),)
ASCII_WORD: Ranges = ((48, 57), (65, 90), (95, 95), (97, 122))  # what RE2's \b looks at
# Python's Unicode meaning of the Perl classes \d, \s, \w, spelled for RE2 (engine_node.policy.patterns translates
# patterns with these; a test compares them with Python's `re` over every assigned code point).
DIGIT = r"\p{Nd}"
SPACE = r"\t\n\x0b\f\r\x1c-\x1f \x{85}\p{Z}"
WORD = r"\p{L}\p{N}_"
_CATEGORIES = {
    sre.CATEGORY_DIGIT: (DIGIT, False),
    sre.CATEGORY_NOT_DIGIT: (DIGIT, True),
    sre.CATEGORY_SPACE: (f"[{SPACE}]", False),
    sre.CATEGORY_NOT_SPACE: (f"[{SPACE}]", True),
    sre.CATEGORY_WORD: (f"[{WORD}]", False),
    sre.CATEGORY_NOT_WORD: (f"[{WORD}]", True),
}
_PLACEHOLDERS = 0x10FF00  # private-use code points standing for RE2 classes while Python's parser reads a pattern
_FLAGS = re.compile(r"\(\?([imsU]*(?:-[imsU]*)?)(\)|:)")


@lru_cache(maxsize=1)
def _every_code_point() -> bytes:
    """Every code point but the surrogates, in order, as UTF-8 (4.4 MB, built once)."""
    code_points = array("I", range(0xD800))
    code_points.extend(range(0xE000, 0x110000))
    return code_points.tobytes().decode(f"utf-32-{sys.byteorder[0]}e").encode()


@lru_cache(maxsize=128)
def re2_ranges(cls: str) -> Ranges:
    """The code points an RE2 class matches (`\\p{Han}`, `[[:alpha:]]`), read off RE2 over every code point."""
    ranges = []
    for run in re2.compile(f"(?:{cls})+").finditer(_every_code_point()):
        chars = run.group().decode()
        ranges.append((ord(chars[0]), ord(chars[-1])))
    return tuple(ranges)


@lru_cache(maxsize=1024)
def class_work(ranges: Ranges) -> tuple[int, int]:
    """What RE2's DFA steps through, at most, to read one character of a class: forwards, then backwards. RE2 compiles
    a class into its UTF-8 byte sequences (`\\w` has 908); reading a byte, a DFA state visits each byte range the
    sequences offer at that point. The cost of a class is the largest sum of those choices over one character, in each
    direction: `[ab]` 1 and 1, `\\d` 32 and 30, `\\w` 115 and 478 (backwards, its sequences share no prefix)."""
    sequences = [sequence for lo, hi in _without_surrogates(ranges) for sequence in _utf8_sequences(lo, hi)]
    return _choices(sequences), _choices([tuple(reversed(sequence)) for sequence in sequences])


def _without_surrogates(ranges: Ranges) -> list[tuple[int, int]]:
    return [(a, b) for lo, hi in ranges for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)) if a <= b]


def _utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """The code points lo..hi as UTF-8 byte-range sequences, each byte's range independent of the others (the
    splitting RE2, Go and Rust's regex compilers perform)."""
    out, todo = [], [(lo, hi)]
    while todo:
        lo, hi = todo.pop()
        split = next(((lo, limit, limit + 1, hi) for limit in (0x7F, 0x7FF, 0xFFFF) if lo <= limit < hi), None)
        for width in range(1, len(chr(lo).encode())):
            if split:
                break
            mask = (1 << (6 * width)) - 1
            if lo & ~mask != hi & ~mask:
                if lo & mask:
                    split = (lo, lo | mask, (lo | mask) + 1, hi)
                elif hi & mask != mask:
                    split = (lo, (hi & ~mask) - 1, hi & ~mask, hi)
        if split:
            todo += [(split[2], split[3]), (split[0], split[1])]
        else:
            out.append(tuple(zip(chr(lo).encode(), chr(hi).encode(), strict=True)))
    return out


def _choices(sequences: list[tuple[tuple[int, int], ...]]) -> int:
    if not sequences or not sequences[0]:
        return 0
    following: dict[tuple[int, int], list] = {}
    for sequence in sequences:
        following.setdefault(sequence[0], []).append(sequence[1:])
    return len(following) + max(_choices([rest for rest in group if rest]) for group in following.values())


def union(ranges: list[tuple[int, int]]) -> Ranges:
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return tuple(out)


def fold(ranges: Ranges) -> Ranges:
    """The set with the other case of its letters added (ranges up to 512 code points: wider ones are classes such
    as \\w that hold both cases already, or caseless scripts)."""
    extra = []
    for lo, hi in ranges:
        if hi - lo > 512:
            continue
        for cp in range(lo, hi + 1):
            char = chr(cp)
            for other in {char.lower(), char.upper(), char.casefold()}:
                if len(other) == 1 and other != char:
                    extra.append((ord(other), ord(other)))
    return union([*ranges, *extra]) if extra else ranges


def parse(pattern: str) -> tuple[sre_parse.SubPattern, dict[int, Ranges]]:
    """Python's parse tree of a pattern RE2 compiled, and the sets its placeholder characters stand for. Raises
    re.error for what Python's parser cannot read."""
    out: list[str] = []
    classes: dict[int, Ranges] = {}
    flags: set[str] = set()

    def placeholder(cls: str) -> str:
        cp = _PLACEHOLDERS + len(classes)
        classes[cp] = re2_ranges(cls)
        return f"\\U{cp:08x}"

    i, n, in_class = 0, len(pattern), False
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            escaped = pattern[i + 1]
            if escaped == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 : n if end < 0 else end]
                out.append("".join(f"\\U{ord(c):08x}" for c in literal))
                i = n if end < 0 else end + 2
            elif escaped in "pP":
                end = pattern.find("}", i + 2) if pattern.startswith("{", i + 2) else i + 2
                end = n - 1 if end < 0 else end
                out.append(placeholder(pattern[i : end + 1]))
                i = end + 1
            elif escaped == "x" and pattern.startswith("{", i + 2):
                end = pattern.find("}", i + 2)
                out.append(f"\\U{int(pattern[i + 3 : end], 16):08x}")
                i = end + 1
            elif escaped == "C":  # any byte: here, any character
                out.append(placeholder("(?s:.)"))
                i += 2
            else:
                out.append("\\Z" if escaped == "z" else pattern[i : i + 2])
                i += 2
        elif in_class:
            end = pattern.find(":]", i + 2) if pattern.startswith("[:", i) else -1
            if end >= 0:  # a POSIX class such as [:alpha:]
                out.append(placeholder(f"[{pattern[i : end + 2]}]"))
                i = end + 2
                continue
            in_class = char != "]"
            out.append(char)
            i += 1
        elif char == "[":
            in_class = True
            out.append(char)
            i += 1
            for lead in "^]":  # a leading ] is a literal
                if i < n and pattern[i] == lead:
                    out.append(lead)
                    i += 1
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
        elif (flag := _FLAGS.match(pattern, i)) and flag.group(1):
            on, _, off = flag.group(1).replace("U", "").partition("-")  # U (lazy by default) costs nothing
            if flag.group(2) == ")":  # RE2 lets flags start mid-pattern, Python only at its start: hoisted
                flags.update(on)
            elif on or off:
                out.append(f"(?{on}{'-' + off if off else ''}:")
            else:
                out.append("(?:")
            i = flag.end()
        else:
            out.append(char)
            i += 1
    prefix = f"(?{''.join(sorted(flags))})" if flags else ""
    with warnings.catch_warnings():  # "possible nested set" and the like: Python's future, not RE2's syntax
        warnings.simplefilter("ignore", FutureWarning)
        return sre_parse.parse(prefix + "".join(out)), classes


def charset(op, av, flags: int, classes: dict[int, Ranges]) -> Ranges:
    """The characters one atom of the parse tree matches (a literal, a class, the dot)."""
    if op is sre.ANY:
        return ANY if flags & sre.SRE_FLAG_DOTALL else complement(NEWLINE)
    if op in (sre.LITERAL, sre.NOT_LITERAL):
        ranges = classes.get(av) or ((av, av),)
        if flags & sre.SRE_FLAG_IGNORECASE:
            ranges = fold(ranges)
        return complement(ranges) if op is sre.NOT_LITERAL else ranges
    negate, parts = False, []
    for item_op, item in av:
        if item_op is sre.NEGATE:
            negate = True
        elif item_op is sre.LITERAL:
            parts.extend(classes.get(item) or ((item, item),))
        elif item_op is sre.RANGE:
            parts.append(item)
        elif item_op is sre.CATEGORY:
            cls, negated = _CATEGORIES[item]
            parts.extend(complement(re2_ranges(cls)) if negated else re2_ranges(cls))
    ranges = union(parts)
    if flags & sre.SRE_FLAG_IGNORECASE:
        ranges = fold(ranges)
    return complement(ranges) if negate else ranges
