"""Imports run downwards (CONTRIBUTING, "Layout"): ``schemas`` <- ``pipeline`` and ``schemas`` <- ``trainer``.
The trainer imports nothing from the pipeline and the pipeline nothing from the trainer: the rules both read live
in ``schemas``, which imports neither program, nor Beam or torch (the trainer would drag them in). Inside a layer
no two modules import each other, directly or round a loop (what two modules both need goes into a third below
both), counting imports inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "schemas": ("pipeline", "trainer", "apache_beam", "torch", "deepspeed"),
    "trainer": ("pipeline", "apache_beam"),
    "pipeline": ("trainer",),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``: ``import a.b``, ``from a.b import c`` (relative ones resolved
    against the file's package), and ``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a literal."""
    package = path.relative_to(REPO).with_suffix("").parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names = [module] if node.module else [f"{module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_what_lies_below_it(layer):
    files = sorted((REPO / layer).rglob("*.py"))
    checked, wrong = 0, []
    for path in files:
        for line, module in _imports(path):
            checked += 1
            top = module.split(".")[0]
            if top in FORBIDDEN[layer]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert len(files) > 5 and checked > 50, (layer, len(files), checked)
    assert not wrong, "\n".join(wrong)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (``from package import module`` names the module, ``from module
    import name`` the module, ``from package import name`` the package's ``__init__``)."""
    paths = {}
    for layer in FORBIDDEN:
        for path in (REPO / layer).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    inner = f"{module}.{alias.name}"
                    found |= {inner} if inner in paths else {module} if module in paths else set()
        graph[name] = found - {name}
    return graph


def test_no_two_modules_import_each_other():
    graph = _module_graph()
    loops = []
    for start in sorted(graph):  # a module on a loop reaches itself
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m == start:
                loops.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300, len(graph)
    assert not loops, f"modules on an import loop: {', '.join(loops)}"


def test_the_scan_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The scanner itself: each form of import it must catch, in a throw-away file inside a layer's package."""
    source = (
        "import pipeline.jobs\n"
        "from pipeline.tokenize import tokenizer\n"
        "from . import sibling\n"
        "def f():\n"
        "    from pipeline.segmenter import Segmenter\n"
        "    importlib.import_module('pipeline.verify')\n"
    )
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "trainer" / "data").mkdir(parents=True)
    path = tmp_path / "trainer" / "data" / "probe.py"
    path.write_text(source)
    assert [m for _, m in _imports(path)] == [
        "pipeline.jobs",
        "pipeline.tokenize",
        "trainer.data.sibling",
        "pipeline.segmenter",
        "pipeline.verify",
    ]
