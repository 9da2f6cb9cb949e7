"""The import graph of popviz/ points one way (docs/architecture.md).

The graph is read from the source with ``ast`` (nothing is imported): every ``import popviz...``
and ``from popviz... import ...``, relative ones resolved, at module level or inside a function
(a lazy import is still an arrow), except under ``if TYPE_CHECKING:`` (annotations only). Each
module belongs to a layer (longest matching prefix in LAYERS); a module may import its own layer
and the layers below it, never a layer above it nor a sibling of the same rank, and the graph has
no circle. The only arrows allowed upwards are the notebook hooks in ALLOWED_UPWARD, and only
from inside a function named ``_repr_html_``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "popviz"

LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    # (rank: lower is higher up, layer, module prefixes)
    (0, "face", ("popviz", "popviz.__main__", "popviz.cli", "popviz.commands", "popviz.emulator._shim")),
    (1, "testing", ("popviz.testing",)),
    (2, "render", ("popviz.render", "popviz.plot")),
    (3, "ci", ("popviz.ci",)),
    (4, "capture", ("popviz.capture",)),
    (5, "emulator", ("popviz.emulator",)),
    (6, "analysis", ("popviz.analysis",)),
    (6, "sources", ("popviz.sources",)),
    (7, "model", ("popviz.model",)),
    (8, "base", ("popviz._version", "popviz.errors", "popviz.escape", "popviz.fileio", "popviz.atomic", "popviz.paths",
                 "popviz.childproc", "popviz.ui", "popviz.schedule", "popviz.plan_file", "popviz.units",
                 "popviz._hooks", "popviz.block_names")),
)
"""Top to bottom. ``popviz`` alone is the package's ``__init__`` (the face); every other entry
matches the module and its submodules. Layers of the same rank may not import each other."""

ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset({
    ("popviz.model.report", "popviz.render.html"),    # Report._repr_html_, ReportSet._repr_html_
    ("popviz.analysis.findings", "popviz.render.html"),  # Result._repr_html_
})
"""(importer, imported): notebook display hooks that call into the HTML renderer lazily."""

HOOK = "_repr_html_"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    function: str | None  # the innermost enclosing function, None at module level

    @property
    def is_hook(self) -> bool:
        return self.function == HOOK and (self.source, self.target) in ALLOWED_UPWARD

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _resolve(name: str, known: dict[str, tuple[Path, bool]]) -> str | None:
    """The module ``name`` refers to: itself, or (``from pkg import attr``) the longest known prefix."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


class _Walker(ast.NodeVisitor):
    def __init__(self, module: str, is_pkg: bool, known: dict[str, tuple[Path, bool]]) -> None:
        self.module, self.known = module, known
        self.package = module if is_pkg else module.rpartition(".")[0]
        self.functions: list[str] = []
        self.edges: list[Edge] = []

    def _add(self, target: str | None, node: ast.AST) -> None:
        if target and target != self.module:
            self.edges.append(Edge(self.module, target, node.lineno, self.functions[-1] if self.functions else None))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
        if name == "TYPE_CHECKING":  # annotations only: not an import at run time
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "popviz" or alias.name.startswith("popviz."):
                self._add(_resolve(alias.name, self.known), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[:len(base) - node.level + 1]
            full = ".".join([*base, node.module] if node.module else base)
        else:
            full = node.module or ""
        if full != "popviz" and not full.startswith("popviz."):
            return
        for alias in node.names:
            self._add(_resolve(f"{full}.{alias.name}", self.known), node)

    def visit_Call(self, node: ast.Call) -> None:  # importlib.import_module("popviz....")
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.startswith("popviz"):
            self._add(_resolve(node.args[0].value, self.known), node)
        self.generic_visit(node)


def import_edges(package: Path = PACKAGE) -> list[Edge]:
    known = modules(package)
    edges = []
    for name, (path, is_pkg) in known.items():
        walker = _Walker(name, is_pkg, known)
        walker.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        edges.extend(walker.edges)
    return edges


def layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] | None = None  # (prefix length, rank, layer)
    for rank, layer, prefixes in LAYERS:
        for prefix in prefixes:
            exact = prefix == "popviz"
            if module == prefix or (not exact and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), rank, layer)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)")
    return best[1], best[2]


def violations(edges: list[Edge]) -> list[str]:
    """Arrows against the layer directions."""
    out = []
    for e in edges:
        (src_rank, src), (dst_rank, dst) = layer_of(e.source), layer_of(e.target)
        if src == dst or dst_rank > src_rank or e.is_hook:
            continue
        what = "sideways" if dst_rank == src_rank else "upwards"
        out.append(f"{e} imports {what}: {src} -> {dst}")
    return out


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a circle)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.is_hook:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan's algorithm, iterative over the successors
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return out


EDGES = import_edges()


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_no_import_points_up_or_sideways():
    assert violations(EDGES) == []


def test_no_import_circle():
    assert cycles(EDGES) == []


def test_upward_hooks_are_only_notebook_display():
    """Each allowed upward arrow exists, and only inside ``_repr_html_`` (a lazy import elsewhere
    in the same module would be reported by the layer test)."""
    hooks = {(e.source, e.target) for e in EDGES if e.is_hook}
    assert hooks == set(ALLOWED_UPWARD)


MAX_LINES = 600


def test_long_modules_say_why():
    """A module over MAX_LINES lines says in its docstring why it stays whole ("over 600 lines
    because ..."); otherwise it is split along its responsibilities."""
    long = {}
    for name, (path, _) in modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if lines > MAX_LINES and f"over {MAX_LINES} lines because" not in " ".join(doc.split()).lower():
            long[name] = lines
    assert long == {}


# ------------------------------------------------------------------ the checker catches what it should

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "popviz" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "popviz"


def test_checker_finds_an_upward_lazy_import_and_a_circle(tmp_path):
    pkg = _tree(tmp_path, {
        "__init__.py": "",
        "model/__init__.py": "",
        "model/report.py": "def f():\n    from popviz.analysis import pipeline\n",
        "analysis/__init__.py": "",
        "analysis/pipeline.py": "from ..model import report\nfrom . import memory\n",
        "analysis/memory.py": "import popviz.analysis.pipeline\n",
        "sources/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from popviz.analysis import memory\n",
    })
    edges = import_edges(pkg)
    assert sorted(str(e) for e in edges) == [
        "popviz.analysis.memory -> popviz.analysis.pipeline (line 1)",
        "popviz.analysis.pipeline -> popviz.analysis.memory (line 2)",
        "popviz.analysis.pipeline -> popviz.model.report (line 1)",
        "popviz.model.report -> popviz.analysis.pipeline (line 2)",
    ]
    assert violations(edges) == ["popviz.model.report -> popviz.analysis.pipeline (line 2) imports upwards: "
                                 "model -> analysis"]
    assert cycles(edges) == [["popviz.analysis.memory", "popviz.analysis.pipeline", "popviz.model.report"]]


def test_checker_allows_a_listed_hook_only_inside_repr_html(tmp_path):
    pkg = _tree(tmp_path, {
        "__init__.py": "",
        "model/__init__.py": "",
        "model/report.py": "class R:\n    def _repr_html_(self):\n        from popviz.render.html import notebook\n"
                           "    def show(self):\n        from popviz.render import html\n",
        "render/__init__.py": "",
        "render/html.py": "from popviz.model.report import R\n",
        "sources/__init__.py": "from popviz.analysis import x\n",
        "analysis/__init__.py": "",
        "analysis/x.py": "",
    })
    edges = import_edges(pkg)
    assert violations(edges) == [
        "popviz.model.report -> popviz.render.html (line 5) imports upwards: model -> render",
        "popviz.sources -> popviz.analysis.x (line 1) imports sideways: sources -> analysis",
    ]
    assert cycles(edges) == [["popviz.model.report", "popviz.render.html"]]  # the line-5 import is no hook


@pytest.mark.parametrize(("module", "layer"), [("popviz", "face"), ("popviz.plan_file", "base"),
                                                ("popviz.emulator._shim.poptorch", "face"),
                                                ("popviz.emulator.costmodel", "emulator")])
def test_layer_of(module, layer):
    assert layer_of(module)[1] == layer
