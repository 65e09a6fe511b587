"""The shape of the package stays: no import circles, and no stage imports a later one.

Reads every ``import`` of ``rankscope/`` (function-level ones too: a lazy import is still a dependency;
not those under ``if TYPE_CHECKING:``) and checks it against ``MAY_IMPORT``, the one-direction layering of docs/architecture.md as data.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "rankscope"

# Stage -> the stages it may import (besides itself). The foundation modules (errors, intlist, version)
# may be imported by all. collect and model are parallel: both stand on store, neither knows the other.
FOUNDATION = {"errors", "intlist", "version"}
# The facade: ``rankscope/__init__.py`` loads the public names lazily from wherever they live.
TOP = "rankscope"
MAY_IMPORT: dict[str, set[str]] = {
    "store": set(),
    "collect": {"store"},
    "rpc": {"collect", "store"},
    "engine": set(),
    "model": {"store", "engine"},
    "synth": {"model", "store"},
    "analysis": {"model", "store", "engine"},
    "render": {"analysis", "model", "store"},
    "web": {"render", "analysis", "model", "store", "engine"},
    "demo": {"collect", "store", TOP},  # the demo is a training script: it uses the public API
    "api": {"analysis", "model", "render", "store", "engine"},
    "commands": {"collect", "store", "engine", "model", "analysis", "render", "web", "synth", "demo", "api"},
    "cli": {"commands"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (names for the type checker, never imported)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] == TOP:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.split(".")[0] == TOP}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def _stage(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else TOP


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _imports(_modules())


def test_every_stage_is_declared(graph):
    stages = {_stage(m) for m in graph} - FOUNDATION - {TOP}
    assert stages <= set(MAY_IMPORT), f"stages without a rule in MAY_IMPORT: {sorted(stages - set(MAY_IMPORT))}"


def test_no_import_circles(graph):
    # the facade's lazy getattr imports everything by design; it is no member of a circle of its stages
    inner = {m: {d for d in ds if d != TOP} for m, ds in graph.items() if m != TOP}
    assert _cycles(inner) == []


def test_no_stage_imports_a_later_one(graph):
    bad = []
    for mod, deps in graph.items():
        src = _stage(mod)
        if src == TOP or src in FOUNDATION:
            if src in FOUNDATION:
                bad += [f"{mod} -> {d}" for d in deps if _stage(d) not in FOUNDATION]
            continue
        allowed = MAY_IMPORT[src] | FOUNDATION | {src}
        bad += [f"{mod} -> {d}" for d in deps if _stage(d) not in allowed]
    assert bad == []


def test_the_checks_can_fail():
    """The rules above catch what they are for (a circle, an upward import) on a hand-made graph."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _stage("rankscope.model.run") == "model" and "analysis" not in MAY_IMPORT["model"]
