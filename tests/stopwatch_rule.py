"""The suite's stopwatch rule: no test asserts that something took less (or more) than a wall-clock bound.

A loaded machine stretches every elapsed time, so such an assertion fails on timing, not on behaviour; speed and
latency belong in `make bench`. A test asserts an order, a count, a state or a stored result instead.

`stopwatch_asserts(source)` finds, in one module's source, every `assert` that compares an elapsed time: a
difference involving a clock reading (`time.monotonic()`, `time.time()`, `time.perf_counter()`, their `_ns`
forms, an event loop's `.time()`, a datetime's `.timestamp()`), or a name, an item or an attribute (`took`,
`during["seconds"]`, `self.took`) assigned from such a reading or such a difference, ordered against anything with
`<`, `<=`, `>` or `>=`. Two moments ordered against each other (`sample["t"] <= time.time()`) are an order, not a
stopwatch; waiting for a state with a generous deadline (`wait_until`, `while time.monotonic() < deadline`) asks
whether something happens at all, and stays allowed.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

CLOCKS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns", "timestamp"}
ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


@dataclass(frozen=True)
class Stopwatch:
    path: str
    line: int
    source: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: asserts on elapsed time: {self.source}"


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in CLOCKS


class _Names(ast.NodeVisitor):
    """Names holding clock readings (`started = time.monotonic()`) and elapsed times (`took = now - started`),
    gathered over the whole module until nothing new is learned (assignment order does not matter)."""

    def __init__(self, tree: ast.AST):
        self.readings: set[str] = set()
        self.elapsed: set[str] = set()
        by_kind = {"reading": self.readings, "elapsed": self.elapsed}
        assignments = [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)]
        changed = True
        while changed:
            changed = False
            for node in assignments:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is None:
                    continue
                kind = self.kind(node.value)
                for target in targets:
                    for name in _target_names(target):
                        known = by_kind.get(kind)
                        if known is not None and name not in known:
                            known.add(name)
                            changed = True

    def kind(self, node: ast.AST) -> str | None:
        if _is_clock_call(node):
            return "reading"
        if isinstance(node, ast.Name | ast.Subscript | ast.Attribute):
            held = _held(node)
            if held in self.elapsed:
                return "elapsed"
            if held in self.readings:
                return "reading"
        if isinstance(node, ast.BinOp):
            left, right = self.kind(node.left), self.kind(node.right)
            if isinstance(node.op, ast.Sub) and left == "reading":
                # now - 15 is a moment; now - started (or now - anything not a constant) is an elapsed time
                return "reading" if isinstance(node.right, ast.Constant) else "elapsed"
            if isinstance(node.op, ast.Sub) and right == "reading":
                return "elapsed"
            if "elapsed" in (left, right):
                return "elapsed"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"round", "abs", "float"}:
            return self.kind(node.args[0]) if node.args else None
        return None

    def mentions_elapsed(self, node: ast.AST) -> bool:
        return any(self.kind(part) == "elapsed" for part in ast.walk(node))


def _held(node: ast.AST) -> str:
    """What a name, an item or an attribute is called where it is assigned and read: `took`, `during['seconds']`,
    `self.took`."""
    return node.id if isinstance(node, ast.Name) else ast.unparse(node)


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name | ast.Subscript | ast.Attribute):
        return [_held(target)]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


def stopwatch_asserts(source: str, path: str = "<source>") -> list[Stopwatch]:
    tree = ast.parse(source)
    names = _Names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if not any(isinstance(op, ORDERINGS) for op in compare.ops):
                continue
            if any(names.mentions_elapsed(side) for side in [compare.left, *compare.comparators]):
                found.append(Stopwatch(path, node.lineno, ast.get_source_segment(source, node) or ""))
                break
    return found


def stopwatches_under(root: Path) -> list[Stopwatch]:
    found = []
    for path in sorted(root.rglob("*.py")):
        found.extend(stopwatch_asserts(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent))))
    return found
