"""What a strict pattern costs RE2 on every message, bounded before a node runs it.

RE2 is linear in the text, but its constant depends on the pattern. It searches with DFAs built lazily, a state at a
time: a state is the set of pattern positions where a partial match may stand. A built state is cached (a search
through built states costs ~1 ns a byte); building one costs ~0.3 to 5 us, more for large character classes such as
`\\w`. Most patterns need a few dozen states. `(?:😀|😁)*😀(?:😀|😁){60}c` needs one for every combination of partial
matches, 2^60: a hostile message makes RE2 build a new state at each character, and once the DFA's memory is spent
RE2 falls back to its NFA, whose cost per byte grows with the pattern (tens of milliseconds a message).

So the states are counted before a node runs a pattern: its position automaton (the construction RE2's DFA performs
over its program, here over characters rather than UTF-8 bytes) is explored as the three DFAs a search uses: forwards
and unanchored until a match, the continuation of a match, and backwards from a match's end to find its start. The
work of building them is added up in units of ~1-2 ns of a node's CPU (`_count`); a pattern, and a template's
patterns together, are refused above fixed budgets. The count is a property of the pattern: the same on every
machine, loaded or not. See docs/policy-patterns.md for the limits and what they cost.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from re import _constants as sre

from engine_node.policy import pattern_syntax as syntax

# Positions of one expanded pattern (`\d{17}` is 17). Realistic strict patterns use at most ~70.
MAX_POSITIONS = 250
# The work of building a pattern's DFA states, in units of ~1-2 ns of a node's CPU (see `_count`): at most MAX_UNITS a
# pattern (realistic strict patterns need at most ~3,000,000, the shipped ones ~60,000), MAX_TEMPLATE_UNITS a
# template. A node pays it once per config, over the messages that first reach each state.
MAX_UNITS = 4_000_000
MAX_TEMPLATE_UNITS = 12_000_000
# RE2's program for a pattern, in instructions (`\w` alone is 1,343: every letter of every script). Compiling costs
# ~1-2 us an instruction, forwards and again backwards, at every save and on every node; a program this size also
# bounds what the pass that fills a `hit` group can cost. Realistic strict patterns use at most ~8,000.
MAX_PROGRAM = 16_384
MAX_TEMPLATE_PROGRAM = 131_072
STATE_UNITS = 250  # a state's own cost: allocating, hashing and linking it and its UTF-8 byte states
POSITION_UNITS = 30  # each position live in it...
CLASS_UNITS = 8  # ...plus this times the byte ranges RE2 steps through to read a character of its class (`class_work`)
# Classes of characters a pattern tells apart (it bounds the work of the count; realistic patterns use under 30).
MAX_CLASSES = 128
# What one scan holds: the first and last 2,048 characters of a message and the line break between them.
SCAN_CHARS = 4097


class TooCostly(ValueError):
    """A pattern whose cost is not bounded; the message says why in words a template author can act on."""


@dataclass(frozen=True)
class Cost:
    positions: int  # positions of the expanded pattern
    states: int  # DFA states: unanchored search, continuation of a match, reverse search, together
    units: int  # the work of building them (see _count)
    width: int  # most positions live at once
    program: int = 0  # RE2's instructions, once compiled (engine_node.policy.patterns fills it in)


# What an assertion needs of its neighbours. A context is START or END (an edge of the text), None (unknown: every
# assertion may hold) or (word, newline) of the neighbouring character.
START, END = "start", "end"
_KINDS = {
    sre.AT_BEGINNING_STRING: "text_start",
    sre.AT_END_STRING: "text_end",
    sre.AT_BOUNDARY: "boundary",
    sre.AT_NON_BOUNDARY: "non_boundary",
}


def _holds(kind: str, before, after) -> bool:
    if kind in ("text_start", "line_start"):
        return before is None or before == START or (kind == "line_start" and before != END and before[1])
    if kind in ("text_end", "line_end"):
        return after is None or after == END or (kind == "line_end" and after != START and after[1])
    if before is None or after is None:
        return True
    boundary = (before not in (START, END) and before[0]) != (after not in (START, END) and after[0])
    return boundary if kind == "boundary" else not boundary


class _Automaton:
    """The positions of the expanded pattern (characters and assertions) and which may follow which, as bit masks.
    Each node returns (nullable, first positions, last positions)."""

    def __init__(self, classes: dict[int, syntax.Ranges]):
        self.classes = classes
        self.sets: list[syntax.Ranges | None] = []  # None: an assertion
        self.kinds: dict[int, str] = {}  # assertion position -> what it needs
        self.follow: list[int] = []
        self.repeats: list[str] = []  # counted repeats as written: {60}, {1,20}

    def position(self, ranges: syntax.Ranges | None, kind: str = "") -> tuple[bool, int, int]:
        if len(self.sets) >= MAX_POSITIONS:
            raise _TooManyPositions
        if kind:
            self.kinds[len(self.sets)] = kind
        self.sets.append(ranges)
        self.follow.append(0)
        bit = 1 << (len(self.sets) - 1)
        return False, bit, bit

    def link(self, last: int, first: int) -> None:
        while last:
            low = last & -last
            self.follow[low.bit_length() - 1] |= first
            last ^= low

    def concat(self, head: tuple[bool, int, int], tail: tuple[bool, int, int]) -> tuple[bool, int, int]:
        (n1, f1, l1), (n2, f2, l2) = head, tail
        self.link(l1, f2)
        return n1 and n2, f1 | (f2 if n1 else 0), l2 | (l1 if n2 else 0)

    def sequence(self, items, flags: int) -> tuple[bool, int, int]:
        result = (True, 0, 0)
        for op, av in items:
            result = self.concat(result, self.node(op, av, flags))
        return result

    def node(self, op, av, flags: int) -> tuple[bool, int, int]:
        if op is sre.SUBPATTERN:
            _group, add, remove, items = av
            return self.sequence(items, (flags | add) & ~remove)
        if op is sre.BRANCH:
            nullable, first, last = False, 0, 0
            for items in av[1]:
                n2, f2, l2 = self.sequence(items, flags)
                nullable, first, last = nullable or n2, first | f2, last | l2
            return nullable, first, last
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            return self.repeat(*av, flags)
        if op is sre.AT:
            line = flags & sre.SRE_FLAG_MULTILINE
            if av in (sre.AT_BEGINNING, sre.AT_END):
                kind = ("line_" if line else "text_") + ("start" if av is sre.AT_BEGINNING else "end")
                return self.position(None, kind)
            return self.position(None, _KINDS[av])
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.IN, sre.ANY):
            return self.position(syntax.charset(op, av, flags, self.classes))
        raise TooCostly(f"its cost cannot be estimated ({str(op).lower()} is not supported)")

    def repeat(self, lo: int, hi, items, flags: int) -> tuple[bool, int, int]:
        unbounded = hi is sre.MAXREPEAT
        if lo >= 2 or (not unbounded and hi >= 2):
            self.repeats.append(f"{{{lo},}}" if unbounded else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}")
        result = (True, 0, 0)
        for _ in range(lo - 1 if unbounded and lo else lo):
            result = self.concat(result, self.sequence(items, flags))
        if unbounded:  # x* or the last x of x{n,}: a loop
            nullable, first, last = self.sequence(items, flags)
            self.link(last, first)
            return self.concat(result, (nullable or lo == 0, first, last))
        tail = (True, 0, 0)  # x{lo,hi} continues (x(x(x)?)?)?, as RE2 expands it
        for _ in range(hi - lo):
            _nullable, first, last = self.concat(self.sequence(items, flags), tail)
            tail = (True, first, last)
        return self.concat(result, tail)


class _TooManyPositions(Exception):
    pass


class _OverBudget(Exception):
    pass


def _position_units(ranges: syntax.Ranges, reverse: bool) -> int:
    """What a position waiting on a character class adds to each state it is live in."""
    return POSITION_UNITS + CLASS_UNITS * syntax.class_work(ranges)[reverse]


def _symbols(automaton: _Automaton) -> list[tuple[int, tuple[bool, bool], str]]:
    """The alphabet cut into classes of characters that no position and no assertion tells apart: for each, the
    positions that accept it, its context for assertions (ASCII word character, newline) and one of its characters."""
    kinds = set(automaton.kinds.values())
    distinct: dict[syntax.Ranges, int] = {}
    for index, ranges in enumerate(automaton.sets):
        if ranges is not None:
            distinct[ranges] = distinct.get(ranges, 0) | (1 << index)
    extra = len(automaton.sets)  # two bits past the positions: ASCII word character, newline
    if kinds & {"boundary", "non_boundary"}:
        distinct[syntax.ASCII_WORD] = distinct.get(syntax.ASCII_WORD, 0) | (1 << extra)
    if kinds & {"line_start", "line_end"}:
        distinct[syntax.NEWLINE] = distinct.get(syntax.NEWLINE, 0) | (1 << (extra + 1))
    bounds = sorted({b for ranges in distinct for lo, hi in ranges for b in (lo, hi + 1)} | {0})
    signature = [0] * len(bounds)
    for ranges, mask in distinct.items():
        for lo, hi in ranges:
            for k in range(bisect_right(bounds, lo) - 1, bisect_right(bounds, hi)):
                signature[k] |= mask
    examples: dict[int, int] = {}  # the highest code point of each class: the longest UTF-8, RE2's longest path
    for k, sig in enumerate(signature):
        lo, hi = bounds[k], (bounds[k + 1] - 1 if k + 1 < len(bounds) else 0x10FFFF)
        if 0xD800 <= hi <= 0xDFFF:  # a surrogate cannot be sent as text
            hi = 0xD7FF if lo < 0xD800 else -1
        if lo <= hi <= 0x10FFFF:
            examples[sig] = max(examples.get(sig, 0), hi)
    if len(examples) > MAX_CLASSES:
        raise TooCostly(
            f"too costly to check: it tells apart more than {MAX_CLASSES} kinds of characters; split it into "
            "several patterns"
        )
    positions = (1 << extra) - 1
    return [
        (sig & positions, (bool(sig >> extra & 1), bool(sig >> (extra + 1) & 1)), chr(example))
        for sig, example in sorted(examples.items())
    ]


class SearchDfa:
    """One of the DFAs RE2 runs over the positions: forwards (unanchored while `restart` joins every state, as the
    implicit `.*?` before a pattern does), or backwards from a match's end."""

    def __init__(self, automaton: _Automaton, symbols: list, *, reverse: bool):
        self.symbols, self.reverse, self.kinds = symbols, reverse, automaton.kinds
        self.weights = [0 if ranges is None else _position_units(ranges, reverse) for ranges in automaton.sets]
        self.assertions = sum(1 << p for p in automaton.kinds)
        self.follow = automaton.follow
        if reverse:
            self.follow = [0] * len(automaton.follow)
            for p, targets in enumerate(automaton.follow):
                while targets:
                    low = targets & -targets
                    self.follow[low.bit_length() - 1] |= 1 << p
                    targets ^= low
        self._unions: dict[int, int] = {0: 0}
        self._closures: dict[tuple, tuple[int, bool]] = {}

    def _union(self, consumed: int) -> int:
        following = self._unions.get(consumed)
        if following is None:
            following, rest = 0, consumed
            while rest:
                low = rest & -rest
                following |= self.follow[low.bit_length() - 1]
                rest ^= low
            self._unions[consumed] = following
        return following

    def _live(self, mask: int, before, after, last: int) -> tuple[int, bool]:
        """The character positions live between two characters once the assertions in `mask` that hold are passed,
        and whether one of those ends a match."""
        pending = mask & self.assertions
        if not pending:
            return mask, False
        key = (mask, before, after)
        found = self._closures.get(key)
        if found is None:
            chars, matched, seen = mask & ~self.assertions, False, 0
            while pending:
                low = pending & -pending
                pending ^= low
                seen |= low
                position = low.bit_length() - 1
                if _holds(self.kinds[position], before, after):
                    matched = matched or bool(low & last)
                    following = self.follow[position]
                    chars |= following & ~self.assertions
                    pending |= following & self.assertions & ~seen
            found = self._closures[key] = (chars, matched)
        return found

    def moves(self, state: tuple, last: int, restart: int):
        """(character, next state, live positions) for each class of characters; next state None: no match can
        follow. A state is (positions, context of the last character, whether a match was found)."""
        mask, context, _done = state
        for accepted, symbol, example in self.symbols:
            before, after = (symbol, context) if self.reverse else (context, symbol)
            chars, matched_here = self._live(mask, before, after, last)
            consumed = chars & accepted
            following = self._union(consumed)
            found = matched_here or bool(consumed & last)
            if restart and not found:
                following |= restart
            yield example, ((following, symbol, found and bool(restart)) if following else None), chars

    def explore(self, start: int, last: int, restart: int, budget: int) -> tuple[int, int, int]:
        """(states, units, widest state) of the DFA from `start`; raises _OverBudget once the units pass `budget`."""
        initial = (start, None if self.reverse else START, False)
        seen, todo, units, width = {initial}, [initial], STATE_UNITS, 0
        while todo:
            mask, context, done = todo.pop()
            if done:
                continue  # a match was found: RE2 only finishes the leftmost one (the continuation counts apart)
            steps: dict[tuple, None] = {}  # most classes of characters lead to the same few states
            live = 0
            for accepted, symbol, _example in self.symbols:
                before, after = (symbol, context) if self.reverse else (context, symbol)
                chars, matched_here = self._live(mask, before, after, last)
                steps[(chars & accepted, symbol, matched_here)] = None
                live |= chars
            width = max(width, live.bit_count())
            while live:
                low = live & -live
                units += self.weights[low.bit_length() - 1]
                live ^= low
            for consumed, symbol, matched_here in steps:
                following = self._union(consumed)
                found = matched_here or bool(consumed & last)
                if restart and not found:
                    following |= restart
                state = (following, symbol, found and bool(restart))
                if following and state not in seen:
                    seen.add(state)
                    todo.append(state)
                    units += STATE_UNITS
            if units > budget:
                raise _OverBudget
        return len(seen), units, width


def build_automaton(pattern: str) -> tuple[_Automaton, int, int, list]:
    """The position automaton of a pattern, its first and last positions, and the classes of characters it reads."""
    try:
        parsed, classes = syntax.parse(pattern)
    except (re.error, ValueError, OverflowError, RecursionError) as exc:
        raise TooCostly(f"its cost cannot be estimated ({exc})") from None
    automaton = _Automaton(classes)
    try:
        _nullable, first, last = automaton.sequence(list(parsed), parsed.state.flags)
    except _TooManyPositions:
        repeats = f" ({', '.join(dict.fromkeys(automaton.repeats))})" if automaton.repeats else ""
        raise TooCostly(
            f"too costly to run on every message: its counted repeats{repeats} expand to more than {MAX_POSITIONS} "
            "characters; keep them shorter"
        ) from None
    return automaton, first, last, _symbols(automaton)


def estimate(pattern: str) -> Cost:
    """The pattern's cost, or TooCostly saying what makes it too costly to run on every message."""
    cost = _estimate(pattern)
    if isinstance(cost, TooCostly):
        raise TooCostly(*cost.args)
    return cost


@lru_cache(maxsize=1024)
def _estimate(pattern: str) -> Cost | TooCostly:
    """estimate(), refusals included: a node and the dashboard compile the same patterns again and again."""
    try:
        return _count(pattern)
    except TooCostly as exc:
        return exc


def _count(pattern: str) -> Cost:
    """Explore the three DFAs RE2 runs for a search and add up the work of building their states: STATE_UNITS a
    state, plus for each position live in it POSITION_UNITS and CLASS_UNITS times its class's `class_work` in that
    direction. Calibrated against RE2 building the states `costly_text` walks through, and the reverse states of long
    matches (bench/policy_hostile.py): a unit costs ~1-2 ns for patterns of ASCII, CJK and emoji, small and large
    classes alike (more, in absolute terms a few tens of microseconds, for the smallest patterns)."""
    automaton, first, last, symbols = build_automaton(pattern)
    forward = SearchDfa(automaton, symbols, reverse=False)
    states, units, width = 0, 0, 0
    try:
        for search, start, end, restart in (
            (forward, first, last, first),  # unanchored, until a match
            (forward, first, last, 0),  # a match's continuation
            (SearchDfa(automaton, symbols, reverse=True), last, first, 0),  # from a match's end back to its start
        ):
            more_states, more_units, widest = search.explore(start, end, restart, MAX_UNITS - units)
            states, units, width = states + more_states, units + more_units, max(width, widest)
    except _OverBudget:
        raise TooCostly(
            "too costly to run on every message: RE2 would have to follow every partial match that can start at each "
            f"character{_culprit(automaton)}, an automaton of over {MAX_UNITS:,} units (~5 ms of a node's CPU); "
            "shorten the counted repeats or leave them open ({2,} rather than {2,10}), use narrower classes than \\w "
            "and \\S, or start the pattern with something its repeats cannot match, such as (?:^|\\D) before digits"
        ) from None
    return Cost(len(automaton.sets), states, units, width)


def check_program(program: int | None) -> None:
    """TooCostly when RE2's program for one pattern has more than MAX_PROGRAM instructions (None: RE2 gave up
    compiling it, far past that)."""
    if program is None or program > MAX_PROGRAM:
        raise TooCostly(program_too_large(program))


def program_too_large(program: int | None) -> str:
    size = "would have far more than" if program is None else f"has {program:,} instructions, more than"
    return (
        f"too costly to compile on every node: RE2's program for it {size} {MAX_PROGRAM:,} instructions (\\w alone "
        "is 1,343, \\d 86, and a counted repeat copies them); use narrower classes or fewer repeats"
    )


def check_template(costs: list[Cost]) -> None:
    """TooCostly when a template's patterns together need more than MAX_TEMPLATE_UNITS or MAX_TEMPLATE_PROGRAM."""
    for total, limit, what, key in (
        (sum(c.units for c in costs), MAX_TEMPLATE_UNITS, "RE2's automata for these patterns add up to", "units"),
        (sum(c.program for c in costs), MAX_TEMPLATE_PROGRAM, "RE2's programs for these patterns add up to", "program"),
    ):
        if total > limit:
            costliest = sorted(range(len(costs)), key=lambda i: -getattr(costs[i], key))[:3]
            named = ", ".join(f"[{i}] {getattr(costs[i], key):,}" for i in costliest)
            unit = "units" if key == "units" else "instructions"
            raise TooCostly(
                f"too costly to run on every message together: {what} {total:,} {unit}, more than {limit:,} "
                f"(the costliest: {named}); remove or simplify some"
            )


def _culprit(automaton: _Automaton) -> str:
    repeats = list(dict.fromkeys(automaton.repeats))
    return f" (its counted repeats: {', '.join(repeats[:4])})" if repeats else ""
