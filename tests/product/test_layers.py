"""The library's import graph has no circles and imports only downwards through its layers.

Why: issue 31 found four import circles (config <-> transport.table_refs, lake.catalog <-> lake.port,
pipeline.publish <-> pipeline.publish_executors, transport.address <-> transport.dialects), each
dodged by an import inside a function, where nothing saw it. This test reads every module of
``lib/queuelake`` with ``ast`` (no import runs) and counts every import: at module level, under
``if TYPE_CHECKING:``, inside functions, and the ``"queuelake.module:function"`` strings that
``importlib`` would be handed (entry points). Importing ``a.b.c`` also runs ``a/__init__.py`` and
``a/b/__init__.py``, so those count as imported too.

The layers, top to bottom. A module may import its own layer and the layers below it, never one
above; where a layer has parts (``lake | transport``), the parts do not import each other:

 1. entry points   ``cli``, ``__main__``, ``jobs``, ``notebook_support`` (the notebooks' one import) and
                   ``notebooks.*`` (its parts, one job each: runner, frames, tables, queues, units,
                   axes, time_charts, runs_figure, conversation)
 2. commands       ``commands.*``: a module per command, and the demo's package (``commands.demo.*``: the
                   command, its run end to end, the traffic it seeds, the worked transform)
 3. pipeline       ``pipeline.*``: drain, transform, publish, replay, the runs writer, a conversation drawn
 4. quality        ``quality.*``: the outbound contract and users' suites, which publish and transform run
 5. context        ``context``: opens the queue database (maybe embedded) for pipelines and commands
 6. lake | transport   ``lake.*`` (the Delta port and its engines) | ``transport.*`` (the queue database)
 7. spark          ``spark``, ``spark_progress``, ``spark_version``: the session, its progress, the versions it may be
 8. config         ``config`` (the file read, ``${VAR}`` filled, checks across sections) and
                   ``config_sections`` (each section's keys): every layer above reads its settings from them
 9. dialects       ``dialects.*``: pure per-dialect rules (no settings), the dialect objects and the
                   addresses and quoting they bind, which config validates ``transport.dialect`` and
                   compares addresses with
10. nsb            ``nsb.*``: the NServiceBus wire format (header names and codec, wire times, TimeSpans,
                   type names, ServiceControl's retry headers, the bulk header decoders): no queue
                   database, lake or setting, so every layer that meets the wire can use it
11. base           ``errors``, ``status``, ``report``, ``redaction``, ``stopping``, ``kill_points``, ``versions``,
                   ``timetext``, ``allocator`` (glibc's thresholds), ``local_config`` (the YAML config
                   falls back to)

Package ``__init__`` modules import nothing from queuelake: every submodule's import runs them, so
whatever they imported every submodule would depend on. A module that matches no layer fails the
test: put it in one here (and say why), so the layering is decided, not drifted into.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"
PACKAGE = "queuelake"

# top to bottom; each layer is a list of parts, each part a list of module patterns (without the
# ``queuelake.`` prefix). An exact name wins over a pattern, wherever the two stand.
LAYERS: list[tuple[str, list[list[str]]]] = [
    ("entry points", [["cli", "__main__", "jobs", "notebook_support", "notebooks", "notebooks.*"]]),
    ("commands", [["commands", "commands.*"]]),
    ("pipeline", [["pipeline", "pipeline.*"]]),
    ("quality", [["quality", "quality.*"]]),
    ("context", [["context"]]),
    ("lake | transport", [["lake", "lake.*"], ["transport", "transport.*"]]),
    ("spark", [["spark", "spark_progress", "spark_version"]]),
    ("config", [["config", "config_sections"]]),
    ("dialects", [["dialects", "dialects.*"]]),
    ("nsb", [["nsb", "nsb.*"]]),
    (
        "base",
        [
            [
                "errors",
                "status",
                "report",
                "redaction",
                "stopping",
                "kill_points",
                "versions",
                "timetext",
                "allocator",
                "local_config",
            ]
        ],
    ),
]

_ENTRY_POINT = re.compile(r"queuelake(?:\.\w+)+:\w+")  # a "module:function" string, as entry points name one


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int


def module_files(lib: Path = LIB) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by their __init__)."""
    modules = {}
    for path in sorted((lib / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(lib).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _with_packages(name: str, modules: dict[str, Path]) -> list[str]:
    """``name`` as a module of ours (its longest prefix that is one), and the packages above it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    if not name:
        return []
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every queuelake module ``module`` imports, wherever the import stands (see the docstring)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from a.b import c`` imports the module a.b.c where there is one, else a name of a.b
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _ENTRY_POINT.fullmatch(node.value):
            names = [node.value.partition(":")[0]]
        for name in names:
            for target in _with_packages(name, modules):
                if target != module:
                    found.append(Import(module, target, node.lineno))
    return list(dict.fromkeys(found))  # ``from a import b, c`` names package a once, not per name


def import_graph(lib: Path = LIB) -> dict[str, list[Import]]:
    modules = module_files(lib)
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def circles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for edge in graph.get(v, []):
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(module: str) -> tuple[int, int] | None:
    """(layer index from the top, part index) of a module, None when no layer names it."""
    short = module.removeprefix(PACKAGE + ".")
    for exact in (True, False):
        for i, (_, parts) in enumerate(LAYERS):
            for j, patterns in enumerate(parts):
                for pattern in patterns:
                    if ("*" not in pattern) == exact and fnmatch.fnmatchcase(short, pattern):
                        return i, j
    return None


def _is_package(module: str, graph: dict[str, list[Import]]) -> bool:
    return any(other.startswith(module + ".") for other in graph)


def layer_violations(graph: dict[str, list[Import]]) -> list[str]:
    problems = []
    for module, edges in sorted(graph.items()):
        if _is_package(module, graph):
            problems += [f"{module} (a package __init__) imports {e.target} (line {e.line})" for e in edges]
            continue
        mine = layer_of(module)
        if mine is None:
            problems.append(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")
            continue
        for e in edges:
            theirs = layer_of(e.target)
            if theirs is None or _is_package(e.target, graph):
                continue  # reported as its own module / package inits import nothing (checked above)
            if theirs[0] == mine[0] and theirs[1] != mine[1]:
                problems.append(
                    f"{module} imports {e.target} at line {e.line}: the parts of layer "
                    f"{LAYERS[mine[0]][0]!r} do not import each other"
                )
            elif theirs[0] < mine[0]:
                problems.append(
                    f"{module} (layer {LAYERS[mine[0]][0]!r}) imports {e.target} "
                    f"(layer {LAYERS[theirs[0]][0]!r}) at line {e.line}"
                )
    return problems


def test_the_graph_sees_what_the_library_imports() -> None:
    """A guard on the reader itself: an import graph missing edges would pass everything below."""
    graph = import_graph()
    targets = {(e.source, e.target) for edges in graph.values() for e in edges}
    assert ("queuelake.lake.engines", "queuelake.lake.delta_rs.engine") in targets  # module level
    assert ("queuelake.commands.sessions", "queuelake.lake") in targets  # the package lake.engines runs
    assert ("queuelake.lake.port", "queuelake.lake.files") in targets  # under TYPE_CHECKING
    assert ("queuelake.cli", "queuelake.commands.registry") in targets  # module level
    assert ("queuelake.commands.drain", "queuelake.pipeline.drain") in targets  # inside the run function
    assert ("queuelake.lake.metastore", "queuelake.spark") in targets  # inside a function
    assert len(graph) > 60


def test_no_import_circles() -> None:
    graph = import_graph()
    found = circles(graph)
    details = []
    for component in found:
        members = set(component)
        edges = [f"  {e.source}:{e.line} -> {e.target}" for m in component for e in graph[m] if e.target in members]
        details.append(" <-> ".join(component) + "\n" + "\n".join(edges))
    assert found == [], "import circles:\n" + "\n".join(details)


def test_imports_follow_the_layers() -> None:
    problems = layer_violations(import_graph())
    assert problems == [], "\n".join(problems)


def test_the_checks_catch_a_back_import(tmp_path: Path) -> None:
    """A planted back-import (the config sections reaching into transport.table_refs inside a function,
    the first circle issue 31 removed) is reported as a circle and against the layers."""
    for path in (LIB / PACKAGE).rglob("*.py"):
        copy = tmp_path / path.relative_to(LIB)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    config = tmp_path / PACKAGE / "config_sections.py"
    planted = "\n\ndef _planted():\n    from queuelake.transport.table_refs import queue_ref\n"
    config.write_text(config.read_text(encoding="utf-8") + planted, encoding="utf-8")
    graph = import_graph(tmp_path)
    planted_pair = ("queuelake.config_sections", "queuelake.transport.table_refs")
    assert list(planted_pair) in [[m for m in c if m in planted_pair] for c in circles(graph)]
    assert any(
        p.startswith("queuelake.config_sections (layer 'config') imports queuelake.transport.table_refs")
        for p in layer_violations(graph)
    )
