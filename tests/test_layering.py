"""The package's layers, checked from its import graph (issue 16, point 1).

core (errors, types, info, tensor, frame, context, mapper, routing, meter, backends, api, _runtime, __init__)
  <- native/ (ctypes bindings) <- tensors/ (one module per framework) <- mappers/ (one module per pair)
  <- app (inference, pipeline, cli, benchmarks, clip, textdet, cuda, dma, transport, elements, ...).

A module may import its own layer or any layer below it, never one above; a mapper never imports another mapper (a
helper two mappers share lives with its tensor type; a chain of mappers is the router's job); and no import cycle.
Every import counts, module level or inside a function (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` do not (they never run).

Two kinds of exceptions, both named here with their reason:
- ALLOWED: deliberate and permanent (plugin discovery, the public façade, old import paths kept as lazy aliases).
  Each is pinned to the function that makes it, so it cannot spread to module level or to other code.
- KNOWN_VIOLATIONS / KNOWN_CYCLES: breaks that other changes of issue 16 are removing. The test fails on any break
  not listed AND on any listed break that no longer exists, so each list only shrinks: delete the entry in the
  commit that fixes it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import interop

ROOT = Path(interop.__file__).parent

CORE = frozenset({"errors", "types", "info", "tensor", "frame", "context", "mapper", "routing", "meter", "backends", "_cache",
                  "api", "_runtime", "_dist", "_locks", "__init__"})
APP = frozenset({"inference", "pipeline", "cli", "__main__", "benchmarks", "clip", "textdet", "cuda", "dma", "alloc",
                 "transport", "elements", "nvdec_warm", "cli_run", "cli_lines", "streams", "stream_threads", "stream_results",
                 "postpool", "run_boxes", "_spawn", "_sigint"})
LAYERS = {"native": 1, "tensors": 2, "mappers": 3}
NAMES = ("core", "native", "tensors", "mappers", "app")


def layer_of(module: str) -> int:
    """0 core, 1 native, 2 tensors, 3 mappers, 4 app; KeyError for a module no layer was chosen for."""
    parts = module.split(".")[1:] or ["__init__"]
    head = parts[0]
    if head in CORE:
        return 0
    if head in LAYERS:
        return LAYERS[head]
    if head in APP:
        return 4
    raise KeyError(module)


# ---- the import graph ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    function: str | None  # the top-level function or class.method the import runs in; None: module level


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]):
        self.module, self.known = module, known
        self.package = module if is_package else module.rpartition(".")[0]
        self.scope: list[str] = []
        self.edges: list[Edge] = []

    def _add(self, target: str, node: ast.stmt) -> None:
        if target.split(".")[0] != "interop":
            return
        while target not in self.known:  # `import interop.x.y` where y is a name: the module that defines it
            target = target.rpartition(".")[0]
        if target != self.module:
            self.edges.append(Edge(self.module, target, node.lineno, ".".join(self.scope) or None))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        for alias in node.names:
            sub = f"{prefix}.{alias.name}"
            self._add(sub if sub in self.known else prefix, node)  # `from . import cuda` imports the submodule

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.visit(node.test)
            for stmt in node.body:
                self.visit(stmt)
        for stmt in node.orelse:
            self.visit(stmt)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped


def import_graph() -> list[Edge]:
    mods = module_names()
    known = set(mods)
    edges: list[Edge] = []
    for name, path in mods.items():
        v = _Imports(name, path.name == "__init__.py", known)
        v.visit(ast.parse(path.read_text(), filename=str(path)))
        edges += v.edges
    return edges


# ---- the exceptions ------------------------------------------------------------------------------------------

# (src, dst, the function that makes the import) -> why it is deliberate. Permanent: not to be "fixed".
ALLOWED: dict[tuple[str, str, str], str] = {
    ("interop.backends", "interop.tensors", "load_all"):
        "discovery by registration: load_all imports every backend module so each registers its edges and wrapper; "
        "core never uses a name from them (the routing graph is static, `interop routes` answers anywhere)",
    ("interop.backends", "interop.mappers", "load_all"):
        "discovery by registration, as above",
    ("interop", "interop.alloc", "__getattr__"):
        "the public façade: interop.empty / interop.empty_frame (page-aligned allocation), named lazily",
    ("interop", "interop.inference", "__getattr__"):
        "the public façade: interop.Inference is in DESIGN's API contract, named lazily so `import interop` stays lean",
    ("interop.mappers.ffmpeg_to_cuda", "interop.cuda", "__getattr__"):
        "old import path of open_nvdec / nvdec_frames / from_video_frame (docs and examples before issue 16): a lazy "
        "alias, importing the mapper never loads interop.cuda",
    ("interop.tensors.cuda", "interop.cuda", "__getattr__"):
        "old import path of torch_views (docs and benchmarks before issue 16): a lazy alias, as above",
}

# (src, dst) -> why it breaks the layers today and who removes it. Delete an entry in the commit that fixes it.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}

# The members of each import cycle (a strongly connected component) -> why, and who removes it.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _allowed(e: Edge) -> bool:
    return (e.src, e.dst, e.function) in ALLOWED


def violations(edges: list[Edge]) -> dict[tuple[str, str], list[Edge]]:
    """Upward edges and mapper -> mapper edges, by (src, dst), ALLOWED ones left out."""
    out: dict[tuple[str, str], list[Edge]] = {}
    for e in edges:
        if _allowed(e):
            continue
        src, dst = layer_of(e.src), layer_of(e.dst)
        sideways_mapper = src == dst == LAYERS["mappers"]
        if dst > src or sideways_mapper:
            out.setdefault((e.src, e.dst), []).append(e)
    return out


def cycles(edges: list[Edge]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), ALLOWED edges left out."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not _allowed(e):
            graph.setdefault(e.src, set()).add(e.dst)
            graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _where(es: list[Edge]) -> str:
    return ", ".join(f"line {e.line}" + (f" in {e.function}" if e.function else " (module level)") for e in es)


# ---- the checks ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_graph()


def test_every_module_has_a_layer():
    unplaced = []
    for m in module_names():
        try:
            layer_of(m)
        except KeyError:
            unplaced.append(m)
    assert not unplaced, f"choose a layer for {unplaced}: add the top-level name to CORE or APP in {__file__}"


def test_the_graph_sees_lazy_imports_and_skips_type_checking_blocks(edges):
    """The walker itself: a function-level import is an edge, a TYPE_CHECKING import is not, relative imports
    resolve to modules, `from . import sub` to the submodule."""
    got = {(e.src, e.dst, e.function) for e in edges}
    assert ("interop.cuda", "interop.mappers.ffmpeg_to_cuda", "from_video_frame") in got  # lazy
    assert ("interop.mappers.ffmpeg_to_cuda", "interop.cuda", "__getattr__") in got  # `from .. import cuda`
    assert ("interop.native.cuda_export", "interop.native.cuda_driver", None) in got  # module level, relative
    assert not any(e.src == "interop.mappers.dma_to_vaapi" and e.dst == "interop.native.libva" and e.function is None
                   for e in edges)  # only under `if TYPE_CHECKING:` at module level there
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .tensors import cuda\n"
                     "def f():\n    from .tensors.cuda import CUDATensor\n")
    v = _Imports("interop.x", False, {"interop.x", "interop.tensors", "interop.tensors.cuda"})
    v.visit(tree)
    assert [(e.dst, e.function) for e in v.edges] == [("interop.tensors.cuda", "f")]


def test_no_upward_or_mapper_to_mapper_import_beyond_the_known_ones(edges):
    found = violations(edges)
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    msg = "\n".join(f"  {s} -> {d} ({NAMES[layer_of(s)]} -> {NAMES[layer_of(d)]}): {_where(es)}"
                    for (s, d), es in sorted(new.items()))
    assert not new, (f"imports that break the layers (a mapper helper belongs with its tensor type; a chain of "
                     f"mappers is the router's job; native never imports tensors):\n{msg}")


def test_every_known_violation_still_exists(edges):
    gone = sorted(k for k in KNOWN_VIOLATIONS if k not in violations(edges))
    assert not gone, f"fixed: delete these from KNOWN_VIOLATIONS in {__file__}: {gone}"


def test_no_import_cycle_beyond_the_known_ones(edges):
    found = cycles(edges)
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"fixed (or changed shape): update KNOWN_CYCLES in {__file__}: {gone}"


def test_allowed_exceptions_are_still_made_where_they_are_pinned(edges):
    got = {(e.src, e.dst, e.function) for e in edges}
    stale = sorted(k for k in ALLOWED if k not in got)
    assert not stale, f"no longer made: delete these from ALLOWED in {__file__}: {stale}"


def test_alias_modules_hold_no_logic():
    """An old import path is a re-export: the module-level __getattr__ that serves it only looks the name up in
    interop.cuda, and interop.nvdec_warm is nothing but its import."""
    for mod in ("mappers/ffmpeg_to_cuda.py", "tensors/cuda.py"):
        tree = ast.parse((ROOT / mod).read_text())
        (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
        assert [type(n) for n in fn.body] == [ast.If, ast.Raise], mod
        assert [type(n) for n in fn.body[0].body] == [ast.ImportFrom, ast.Return], mod  # type: ignore[attr-defined]
    tree = ast.parse((ROOT / "nvdec_warm.py").read_text())
    assert {type(n) for n in tree.body} <= {ast.Expr, ast.ImportFrom, ast.Assign}
    assert [n.module for n in tree.body if isinstance(n, ast.ImportFrom)] == ["__future__", "cuda"]


def test_layer_of_knows_the_layers():
    assert [layer_of(m) for m in ("interop", "interop.api", "interop.native.libva", "interop.tensors.cuda",
                                  "interop.mappers.dma_to_npu", "interop.cuda", "interop.elements.decoder")] == \
        [0, 0, 1, 2, 3, 4, 4]
    with pytest.raises(KeyError):
        layer_of("interop.somewhere_new")
