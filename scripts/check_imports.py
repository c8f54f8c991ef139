#!/usr/bin/env python3
"""The import-graph rules (docs/architecture.md, "Layers"): no import cycles; controlplane/lib imports no app;
selectors import no services and no tasks; services import no tasks (they start background work by task name).

Every import counts, at module level or inside a function: a function-level import that only hides a cycle is
still a cycle. Reads each .py under the given packages (migrations excluded) with `ast`, resolves relative imports,
builds the module graph and prints each strongly connected component as a chain of modules, each import with its
file:line. Exit status 1 when a rule is broken.

    python scripts/check_imports.py [--root DIR] [PACKAGE ...]     (default: controlplane engine_node)
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PACKAGES = ("controlplane", "engine_node")
# The project's foundation: it may import only itself, the standard library and third-party packages.
LIB_PACKAGE = "controlplane.lib"
# Every controlplane module outside lib (the apps, and the project's own settings, urls, celery) stands above lib.
LIB_OWNER = "controlplane"
# Reads sit below the writes, and the writes below the background tasks that run them: (lower, what it may not import).
LAYERS = (("selectors", "services"), ("selectors", "tasks"), ("services", "tasks"))


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in packages:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "migrations" in path.relative_to(root).parts:
                continue
            modules[module_name(root, path)] = path
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if name:
        parts = [*parts, *name.split(".")]
    return ".".join(parts)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def module_edges(module: str, path: Path, modules: dict[str, Path], root: Path) -> list[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    shown = str(path.relative_to(root))
    edges: list[Edge] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}" if base else alias.name
                targets.append(submodule if submodule in modules else base)
        for target in targets:
            known = _known(target, modules)
            # A module naming itself is a self-loop; a longer name of it is one of its own submodules.
            if known and (known != module or target == module):
                edges.append(Edge(module, known, shown, node.lineno))
    return edges


def build_graph(root: Path, packages: tuple[str, ...]) -> tuple[dict[str, Path], list[Edge]]:
    modules = source_files(root, packages)
    edges: list[Edge] = []
    for module, path in modules.items():
        edges.extend(module_edges(module, path, modules, root))
    # `from x import a, b` is one import of x: one edge per statement.
    return modules, list(dict.fromkeys(edges))


def strongly_connected(nodes: list[str], graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules deep at most)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One readable cycle through the component's first module (breadth first, inside the component)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [*reversed(chain), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]


def find_problems(root: Path, packages: tuple[str, ...] = DEFAULT_PACKAGES) -> list[str]:
    modules, edges = build_graph(root, packages)
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for edge in edges:
        graph[edge.source].add(edge.target)
        where[(edge.source, edge.target)].append(edge)
    for module in modules:
        graph.setdefault(module, set())
    problems: list[str] = []
    for component in strongly_connected(sorted(modules), graph):
        self_loop = len(component) == 1 and component[0] in graph[component[0]]
        if len(component) < 2 and not self_loop:
            continue
        chain = _shortest_cycle(component, graph)
        lines = [f"import cycle ({len(component)} modules: {', '.join(component)}):"]
        shown = set()
        for source, target in itertools.pairwise(chain):
            edge = where[(source, target)][0]
            shown.add((source, target))
            lines.append(f"    {source} -> {target}    ({edge.path}:{edge.line})")
        others = [
            edge
            for key in sorted(where)
            if key[0] in component and key[1] in component and key not in shown
            for edge in where[key][:1]
        ]
        if others:
            lines.append("  and the other imports inside it:")
            lines.extend(f"    {e.source} -> {e.target}    ({e.path}:{e.line})" for e in others)
        problems.append("\n".join(lines))
    for edge in edges:
        inside_lib = edge.source == LIB_PACKAGE or edge.source.startswith(LIB_PACKAGE + ".")
        target_lib = edge.target == LIB_PACKAGE or edge.target.startswith(LIB_PACKAGE + ".")
        if inside_lib and not target_lib and edge.target.startswith(LIB_OWNER + "."):
            problems.append(
                f"{LIB_PACKAGE} imports an app: {edge.source} -> {edge.target}    ({edge.path}:{edge.line})"
            )
    for edge in edges:
        for lower, upper in LAYERS:
            if _in_layer(edge.source, lower) and _in_layer(edge.target, upper):
                problems.append(f"{lower} import {upper}: {edge.source} -> {edge.target}    ({edge.path}:{edge.line})")
    return problems


def _in_layer(module: str, layer: str) -> bool:
    """A module of that layer: named so (app/selectors.py) or inside a package named so (app/services/x.py)."""
    return layer in module.split(".")[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("packages", nargs="*", default=list(DEFAULT_PACKAGES))
    args = parser.parse_args(argv)
    problems = find_problems(args.root.resolve(), tuple(args.packages))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} import rule(s) broken (docs/architecture.md, Layers)", file=sys.stderr)
        return 1
    print(
        f"imports: no cycles, {LIB_PACKAGE} imports no app, selectors import no services or tasks, services import "
        f"no tasks ({', '.join(args.packages)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
