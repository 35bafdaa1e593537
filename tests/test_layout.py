"""The layering and file-size rules (ARCHITECTURE.md), checked on the source so that they cannot quietly erode: no
import cycle in the package or in scripts/ (imports inside functions count, and so does a submodule's `from . import
x`, which runs its package's __init__), no family name compared outside families/, no class over 300 lines and no
function over 80. The layers themselves are import-linter's contract in pyproject.toml (`lint-imports`, run by make
test)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "maskplay"
FAMILY_NAME = re.compile(r"""\bfamily\s*(==|!=|\bin\b|\bnot in\b)|"""
                         r"""(==|!=)\s*["'](tta|bert|gpt|electra|unilm|xlnet|gpt-bert)["']""")


def module_name(path: Path, root: Path, prefix: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix, *parts] if prefix else parts)


def import_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """module -> the modules of the same tree it imports anywhere in its body (functions included); `from .
    import x` and `from pkg import x` count as importing pkg as well as pkg.x."""
    files = {module_name(f, root, prefix): f for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package():
    assert cycles(import_graph(SRC, "maskplay")) == []


def test_no_import_cycle_in_grimps_graph():
    """The graph import-linter checks the layers on (grimp: imports inside functions included)."""
    graph = grimp.build_graph("maskplay")
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert cycles(edges) == []


def test_no_import_cycle_in_scripts():
    assert cycles(import_graph(ROOT / "scripts", "")) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """The checker itself: a package whose submodule imports its own package (which imports it back)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .a import f\n")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text("")
    assert cycles(import_graph(tmp_path / "pkg", "pkg")) == [["pkg", "pkg.a"]]


def test_no_family_name_is_compared_outside_families():
    """A family's rules live in its class (families/base.py's contract); everything else asks the registry."""
    found = [f"{path.relative_to(SRC)}:{k}: {line.strip()}"
             for path in SRC.rglob("*.py") if "families" not in path.relative_to(SRC).parts
             for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if FAMILY_NAME.search(line) and not line.lstrip().startswith("#")]
    assert found == []


def test_rooms_stay_small():
    too_big = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = {ast.ClassDef: 300, ast.FunctionDef: 80, ast.AsyncFunctionDef: 80}.get(type(node))
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                too_big.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} "
                               f"{node.end_lineno - node.lineno + 1} lines (limit {limit})")
    assert too_big == []
