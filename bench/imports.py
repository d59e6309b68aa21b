"""The package's import graph: every ``import`` counted, at the top of a module, inside a function or under
``TYPE_CHECKING``; the cycles between modules and between layers.

    python -m bench.imports [--graph] [--layers] [--root sentiment_cli]

Prints the cycles between modules (each edge that lies on one), then the cycles between layers (a layer is a
subpackage such as ``training`` or ``data``, or a top-level module such as ``config``), then every import that
points up the layers of :data:`LAYER_ORDER` (docs/development.md's table, base first: a layer imports only
layers before it), and exits 1 when there is any of these, or a layer the order does not place. ``--graph`` also prints each module's imports within the package; ``--layers`` the layer
graph with the number of imports on each edge.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The layers from the base down (docs/development.md, "Layout"): a layer may import only layers before it. The
# library (everything before ``api``) never imports the command line (``cli``, ``__main__``).
LAYER_ORDER = (
    "errors", "decoding", "untrusted", "compact_table", "weights_file", "toml_writer",
    "wording", "objectives", "config", "config_reference",
    "runtime", "outputs",
    "arrow_output", "data", "ngram", "model", "checkpoint", "card", "inference", "evaluation", "behaviour",
    "training", "audit", "suggest", "serving", "api", "root", "cli", "__main__",
)


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every ``.py`` under ``package`` (a package is its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _targets(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The modules of ``known`` that one import statement names (``from . import x`` names ``pkg.x``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module if is_package else module.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            base = base.rsplit(".", 1)[0]
        target = f"{base}.{node.module}" if node.module else base
    else:
        target = node.module or ""
    found = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        if sub in known:
            found.append(sub)
        elif target in known:
            found.append(target)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file (top level, functions, ``TYPE_CHECKING``)."""
    known = modules(package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(node, module, path.name == "__init__.py", known):
                if target != module and not module.startswith(target + "."):   # a package's own __init__
                    graph[module].add(target)
    return graph


def cycle_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges ``u -> v`` that lie on a cycle (``v`` reaches ``u``), sorted."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen
    return sorted((u, v) for u in graph for v in graph[u] if u in reach(v))


def layer_of(module: str) -> str:
    """A module's layer: its subpackage (``sentiment_cli.training.loop`` -> ``training``), or for a top-level
    module the module itself (``sentiment_cli.checkpoint`` -> ``checkpoint``); the package root is ``root``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def layer_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], Counter]:
    """Layer -> the layers it imports, and the number of module imports on each layer edge."""
    layers: dict[str, set[str]] = {}
    counts: Counter = Counter()
    for module, targets in graph.items():
        src = layer_of(module)
        layers.setdefault(src, set())
        for target in targets:
            dst = layer_of(target)
            if dst != src:
                layers[src].add(dst)
                layers.setdefault(dst, set())
                counts[(src, dst)] += 1
    return layers, counts


def upward_edges(layers: dict[str, set[str]], order: tuple[str, ...] = LAYER_ORDER) -> tuple[list, list]:
    """The layer imports that point up ``order`` (``src`` imports a layer placed after it), and the layers
    ``order`` does not place; both sorted."""
    rank = {name: i for i, name in enumerate(order)}
    unplaced = sorted(set(layers) - set(rank))
    up = sorted((u, v) for u, targets in layers.items() for v in targets
                if u in rank and v in rank and rank[v] > rank[u])
    return up, unplaced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="sentiment_cli", help="the package folder (relative to the repository)")
    parser.add_argument("--graph", action="store_true", help="print every module's imports within the package")
    parser.add_argument("--layers", action="store_true", help="print the layer graph with import counts")
    args = parser.parse_args(argv)
    package = ROOT / args.root
    graph = import_graph(package)
    if args.graph:
        for module in sorted(graph):
            print(f"{module}: {', '.join(sorted(graph[module])) or '-'}")
    layers, counts = layer_graph(graph)
    if args.layers:
        for (src, dst), n in sorted(counts.items()):
            print(f"layer {src} -> {dst}: {n}")
    module_cycles, layer_cycles = cycle_edges(graph), cycle_edges(layers)
    edges = sum(len(t) for t in graph.values())
    print(f"{len(graph)} modules, {edges} imports within the package, {len(layers)} layers")
    for u, v in module_cycles:
        print(f"module cycle: {u} -> {v}")
    for u, v in layer_cycles:
        print(f"layer cycle: {u} -> {v} ({counts[(u, v)]} imports)")
    up, unplaced = upward_edges(layers)
    for u, v in up:
        print(f"import up the layers: {u} -> {v} ({counts[(u, v)]} imports)")
    for name in unplaced:
        print(f"layer {name} has no place in bench/imports.py's LAYER_ORDER (docs/development.md): add it")
    if not module_cycles and not layer_cycles and not up and not unplaced:
        print("no cycle between modules or between layers, no import up the layers "
              "(imports inside functions counted)")
    return 1 if module_cycles or layer_cycles or up or unplaced else 0


if __name__ == "__main__":
    sys.exit(main())
