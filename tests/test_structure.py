"""The package's import graph has no cycles (issue 23, "Structure").

The graph is grimp's (requirements/test.txt): every ``import`` in every module
of ``beam_pipeline``, at module level, inside functions and under
``TYPE_CHECKING`` alike, so an import deferred into a function to dodge a
cycle still counts as the cycle it is. Shared types live in the module both
sides use (docs/decisions.md, "No import cycles").
"""
from __future__ import annotations

import textwrap

import grimp
import pytest


def import_cycles(package: str) -> list[list[str]]:
    """One shortest cycle per strongly connected group of modules, as ``[a, b, ..., a]``; [] when acyclic.

    Tarjan's algorithm over grimp's direct imports finds the groups (modules
    that reach each other); within a group the cycle shown is the shortest
    one through its first module (sorted by name), so the message is stable.
    """
    graph = grimp.build_graph(package, cache_dir=None)
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    cycles = []
    for group in _strongly_connected(imports):
        start = group[0]
        if len(group) == 1:  # a module alone is a cycle only if it imports itself
            if start in imports[start]:
                cycles.append([start, start])
            continue
        chains = [graph.find_shortest_chain(importer=b, imported=start) for b in imports[start] if b in group]
        cycles.append([start, *min((c for c in chains if c), key=lambda c: (len(c), c))])
    return cycles


def _strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative (no recursion limit); each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(sorted(group))
    return sorted(groups)


def _describe(graph_package: str, cycle: list[str]) -> str:
    graph = grimp.build_graph(graph_package, cache_dir=None)
    lines = [" -> ".join(cycle)]
    for importer, imported in zip(cycle, cycle[1:]):
        for detail in graph.get_import_details(importer=importer, imported=imported):
            lines.append(f"  {importer}:{detail['line_number']}: {detail['line_contents']}")
    return "\n".join(lines)


def test_beam_pipeline_has_no_import_cycles():
    cycles = import_cycles("beam_pipeline")
    assert not cycles, "import cycles (move the shared names down to a module both sides import):\n" + "\n".join(
        _describe("beam_pipeline", c) for c in cycles)


def _package(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_cycle_finder_names_a_cycle_hidden_in_a_function(tmp_path, monkeypatch):
    """A module-level import one way and a deferred (function-level) import back is a cycle."""
    _package(tmp_path, {
        "cyclic_pkg/__init__.py": "",
        "cyclic_pkg/a.py": "from cyclic_pkg.b import B\n\nclass A: pass\n",
        "cyclic_pkg/b.py": "class B:\n    def make(self):\n        from cyclic_pkg.a import A\n        return A()\n",
        "cyclic_pkg/c.py": "from cyclic_pkg import d\n",
        "cyclic_pkg/d.py": "from cyclic_pkg import e\n",
        "cyclic_pkg/e.py": "import cyclic_pkg.c\n",
        "cyclic_pkg/leaf.py": "from cyclic_pkg.a import A\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic_pkg") == [
        ["cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.a"],
        ["cyclic_pkg.c", "cyclic_pkg.d", "cyclic_pkg.e", "cyclic_pkg.c"],
    ]
    message = _describe("cyclic_pkg", import_cycles("cyclic_pkg")[0])
    assert message.splitlines() == [
        "cyclic_pkg.a -> cyclic_pkg.b -> cyclic_pkg.a",
        "  cyclic_pkg.a:1: from cyclic_pkg.b import B",
        "  cyclic_pkg.b:3: from cyclic_pkg.a import A",
    ]


def test_cycle_finder_passes_an_acyclic_package(tmp_path, monkeypatch):
    """Shared types moved down to a module both sides import: no cycle left."""
    _package(tmp_path, {
        "acyclic_pkg/__init__.py": "",
        "acyclic_pkg/types.py": "class A: pass\nclass B: pass\n",
        "acyclic_pkg/a.py": "from acyclic_pkg.types import A, B\n",
        "acyclic_pkg/b.py": "from acyclic_pkg.types import A, B\nfrom acyclic_pkg import a\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("acyclic_pkg") == []


@pytest.mark.parametrize("edges, groups", [
    ({"x": ["x"]}, [["x"]]),
    ({"x": ["y"], "y": ["z"], "z": ["x", "w"], "w": []}, [["w"], ["x", "y", "z"]]),
    ({f"m{i}": [f"m{i + 1}"] for i in range(5000)} | {"m5000": ["m0"]}, [sorted(f"m{i}" for i in range(5001))]),
])
def test_strongly_connected_groups(edges, groups):
    """Self-loops, a cycle with a tail, and a chain deeper than Python's recursion limit."""
    assert _strongly_connected(edges) == groups


# --- the layers (issue 45; docs/layout.md) -------------------------------------------------------------

#: The packages of ``beam_pipeline``, top layer first: a module may import its own package and any
#: package below its own, never one above. Grouped as docs/layout.md draws them.
LAYERS = (
    "cli",  # command line
    "build",  # one build
    "scoring", "dataset", "transforms", "report", "arrivals", "sources", "web",  # stages and the consumer side
    "options", "config",  # configuration
    "policy", "filters", "dedup",  # decisions and detectors
    "storage", "records", "errors",  # storage and records
)
#: What the package's root holds besides its packages: the face (``__init__``: the version; ``errors``:
#: the exit codes and ``UserError`` every layer may raise) and ``python -m beam_pipeline``.
ROOT_MODULES = {"beam_pipeline", "beam_pipeline.__main__", "beam_pipeline.errors"}
#: A module longer than this says why at its top: a paragraph of its docstring starts with LONG_REASON.
MAX_LINES = 600
LONG_REASON = "Why one long module:"


def upward_imports(package: str, layers: tuple[str, ...]) -> list[str]:
    """``importer:line: statement`` of every import of a package above the importer's own (or of one not in ``layers``)."""
    graph = grimp.build_graph(package, cache_dir=None)
    rank = {name: i for i, name in enumerate(layers)}

    def layer(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] != "__main__" else None  # None: the face, above every layer

    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            a, b = layer(importer), layer(imported)
            if a is None or a == b:
                continue
            if a not in rank or b not in rank or rank[b] < rank[a]:
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    found.append(f"{importer}:{detail['line_number']}: {detail['line_contents']}")
    return found


def test_imports_flow_down_the_layers():
    found = upward_imports("beam_pipeline", LAYERS)
    assert not found, (
        "imports of a layer above the importer's (LAYERS; move the shared names down, docs/layout.md):\n" + "\n".join(found))


def test_every_package_has_a_layer_and_the_root_holds_only_the_face():
    graph = grimp.build_graph("beam_pipeline", cache_dir=None)
    top = {m for m in graph.modules if m.count(".") <= 1}
    packages = {m.split(".")[1] for m in graph.modules if m.count(".") >= 2}
    assert packages == set(LAYERS) - {"errors"}, "a package without a layer, or a layer without a package"
    assert top - {f"beam_pipeline.{p}" for p in packages} == ROOT_MODULES


def test_the_layer_check_names_an_upward_import(tmp_path, monkeypatch):
    """A lower package importing a higher one is named with its line; imports downward pass."""
    _package(tmp_path, {
        "layered_pkg/__init__.py": "",
        "layered_pkg/top/__init__.py": "",
        "layered_pkg/top/a.py": "from layered_pkg.bottom.b import B\n",
        "layered_pkg/bottom/__init__.py": "",
        "layered_pkg/bottom/b.py": "class B:\n    def up(self):\n        from layered_pkg.top import a\n",
        "layered_pkg/bottom/c.py": "from layered_pkg.bottom.b import B\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert upward_imports("layered_pkg", ("top", "bottom")) == [
        "layered_pkg.bottom.b:3: from layered_pkg.top import a"]
    assert upward_imports("layered_pkg", ("bottom", "top")) == [
        "layered_pkg.top.a:1: from layered_pkg.bottom.b import B"]


def long_modules_without_a_reason(root) -> list[str]:
    """Modules under ``root`` of more than MAX_LINES lines whose docstring has no LONG_REASON paragraph."""
    import ast
    import pathlib

    found = []
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(paragraph.startswith(LONG_REASON) for paragraph in doc.split("\n\n")):
            found.append(f"{path}: {lines} lines")
    return found


def test_no_module_is_long_without_saying_why():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "beam_pipeline"
    found = long_modules_without_a_reason(root)
    assert not found, (f"modules over {MAX_LINES} lines: split the second concern out, or say why in a docstring "
                       f"paragraph starting {LONG_REASON!r}:\n" + "\n".join(found))


def test_the_length_check_wants_a_reason_paragraph(tmp_path):
    body = "x = 1\n" * (MAX_LINES + 1)
    (tmp_path / "short.py").write_text('"""Short."""\n' + "x = 1\n" * 10)
    (tmp_path / "long.py").write_text('"""Long.\n\nIt is long."""\n' + body)
    (tmp_path / "reasoned.py").write_text(f'"""Long.\n\n{LONG_REASON} one table, read top to bottom."""\n' + body)
    assert [line.split(": ")[0] for line in long_modules_without_a_reason(tmp_path)] == [str(tmp_path / "long.py")]
