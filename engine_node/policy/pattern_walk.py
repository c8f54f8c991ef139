"""Hostile texts for a strict pattern: the message that makes RE2 build the most new DFA states (benchmarks and tests
use it to measure what engine_node.policy.pattern_cost bounds)."""

from __future__ import annotations

from engine_node.policy.pattern_cost import SCAN_CHARS, START, SearchDfa, build_automaton


def costly_text(pattern: str, chars: int = SCAN_CHARS, horizon: int = 2000) -> str:
    """A text that walks the pattern's unanchored DFA through as many distinct states as it can without a match:
    what a hostile client sends to make RE2 build a new state at each character (benchmarks and tests use it)."""
    automaton, first, last, symbols = build_automaton(pattern)
    search = SearchDfa(automaton, symbols, reverse=False)

    def moves(state):
        for example, following, _chars in search.moves(state, last, first):
            if following is not None and not following[2]:  # a match would end the search
                yield example, following

    state = (first, START, False)
    visited, out, exhausted = {state}, [], False
    while len(out) < chars:
        target, parents = None, {state: None}
        if not exhausted:  # breadth first, up to `horizon` states away, to the nearest one not visited yet
            queue = [state]
            for node in queue:
                for example, following in moves(node):
                    if following not in parents:
                        parents[following] = (node, example)
                        if following not in visited:
                            target = following
                            break
                        queue.append(following)
                if target is not None or len(parents) > horizon:
                    break
            exhausted = target is None and len(parents) <= horizon
        if target is None:  # nothing new nearby: one step that keeps clear of a match
            step = next(moves(state), None)
            if step is None:
                break
            out.append(step[0])
            state = step[1]
            continue
        path, node = [], target
        while parents[node] is not None:
            node, example = parents[node]
            path.append(example)
        out.extend(reversed(path))
        visited.add(target)
        state = target
    return "".join(out[:chars])
