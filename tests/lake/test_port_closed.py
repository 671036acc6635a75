"""Nothing outside ``lib/queuelake/lake/`` reads a lake file (issue 31, "the lake port closed").

Why: publish, replay and transform each opened the data files behind ``added_files`` themselves
(``storage.filesystem``, ``pyarrow.parquet``, Spark's ``.parquet(...)``), and the demo looked for
``_delta_log`` folders: how the lake is stored leaked into every pipeline. They read through the
port now, and round files through ``lake/round_files.py``. This test reads every module outside
``lake/`` with ``ast`` (no import runs) and reports, wherever it stands (module level, in a function,
under ``TYPE_CHECKING``):

- an import of ``pyarrow.parquet`` or ``pyarrow.fs`` (opening Parquet files, reaching storage);
- an import from ``queuelake.lake.storage`` but ``job_secrets`` (errors are redacted of the job's secrets);
- ``ParquetFile``/``ParquetFileFormat``/``ParquetDataset``/``read_parquet``, or the ``dataset()`` of
  ``pyarrow.dataset`` (whose expressions, ``ds.field``, stay free to use);
- a Spark read of files: ``.parquet(...)`` on a ``.read`` chain;
- a string holding ``_delta_log`` (a docstring may talk about the log; code may not look for it).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"
PACKAGE = "queuelake"

STORAGE = "queuelake.lake.storage"
STORAGE_ALLOWED = {"job_secrets"}  # cli, run, transform: the job's secrets, redacted from errors
FORBIDDEN_MODULES = ("pyarrow.parquet", "pyarrow.fs")
FORBIDDEN_NAMES = {"ParquetFile", "ParquetFileFormat", "ParquetDataset", "read_parquet"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _on_read_chain(node: ast.expr) -> bool:
    """True when an attribute chain (``spark.read.schema(s)``) passes through ``.read``."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            if node.attr == "read":
                return True
            node = node.value
        else:
            return False


def lake_file_reads(path: Path, where: str = "") -> list[str]:
    """What in one module reads lake files or storage directly, one line each, ``where:line: what``
    (``where``: how to name the module, its file name by default)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = _docstrings(tree)
    dataset_aliases: set[str] = set()
    found: list[str] = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{where or path.name}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(FORBIDDEN_MODULES):
                    report(node, f"imports {alias.name}")
                elif alias.name == STORAGE:
                    report(node, f"imports {STORAGE}")
                elif alias.name == "pyarrow.dataset":
                    dataset_aliases.add(alias.asname or "pyarrow")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if module.startswith(FORBIDDEN_MODULES) or full.startswith(FORBIDDEN_MODULES):
                    report(node, f"imports {full}")
                elif module == STORAGE and alias.name not in STORAGE_ALLOWED:
                    report(node, f"imports {alias.name} from {STORAGE}")
                elif full == STORAGE:
                    report(node, f"imports {STORAGE}")
                elif full == "pyarrow.dataset":
                    dataset_aliases.add(alias.asname or alias.name)
                if alias.name in FORBIDDEN_NAMES:
                    report(node, f"imports {alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
            report(node, f"uses {node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            report(node, f"uses {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "_delta_log" in node.value:
            if id(node) not in docstrings:
                report(node, "looks for _delta_log")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr == "parquet" and _on_read_chain(node.func.value):
            report(node, "reads files with Spark's .parquet(...)")
        value = node.func.value
        if node.func.attr == "dataset" and isinstance(value, ast.Name) and value.id in dataset_aliases:
            report(node, "opens files with pyarrow.dataset.dataset(...)")
    return sorted(set(found))


def outside_lake(lib: Path = LIB) -> list[Path]:
    package = lib / PACKAGE
    return [p for p in sorted(package.rglob("*.py")) if not p.relative_to(package).parts[0] == "lake"]


def violations(lib: Path = LIB) -> list[str]:
    return [line for path in outside_lake(lib) for line in lake_file_reads(path, str(path.relative_to(lib)))]


def test_nothing_outside_the_lake_reads_a_lake_file() -> None:
    problems = violations()
    assert problems == [], "read lake files through lake/round_files.py or the port:\n" + "\n".join(problems)


def test_the_reader_sees_reads_where_they_are_allowed() -> None:
    """A guard on the check itself: inside lake/ it finds the reads round_files.py does for everyone (with
    reading.py's Parquet format)."""
    found = "\n".join(lake_file_reads(LIB / PACKAGE / "lake" / "round_files.py"))
    assert "imports pyarrow.parquet" in found
    assert "uses ParquetFileFormat" in "\n".join(lake_file_reads(LIB / PACKAGE / "lake" / "reading.py"))
    assert "opens files with pyarrow.dataset.dataset(...)" in found
    assert "reads files with Spark's .parquet(...)" in found
    assert len(outside_lake()) > 60


def test_the_check_catches_a_planted_read(tmp_path: Path) -> None:
    """Each way round files were read before (issue 31's list), planted in transform.py, is reported."""
    shutil.copytree(LIB / PACKAGE, tmp_path / PACKAGE)
    transform = tmp_path / PACKAGE / "pipeline" / "transform.py"
    planted = (
        "\n\ndef _planted(spark, uri, root):\n"
        "    import pyarrow.dataset as ds\n"
        "    import pyarrow.parquet as pq\n"
        "    from queuelake.lake import storage\n"
        "    from queuelake.lake.storage import filesystem\n"
        "    fs, path = filesystem(uri)\n"
        "    pq.ParquetFile(path, filesystem=fs)\n"
        "    ds.dataset([path], filesystem=fs)\n"
        "    spark.read.schema(None).parquet(uri)\n"
        '    return (root / "_delta_log").is_dir()\n'
    )
    transform.write_text(transform.read_text(encoding="utf-8") + planted, encoding="utf-8")
    found = "\n".join(violations(tmp_path))
    for what in (
        "imports pyarrow.parquet",
        f"imports {STORAGE}",
        f"imports filesystem from {STORAGE}",
        "uses ParquetFile",
        "opens files with pyarrow.dataset.dataset(...)",
        "reads files with Spark's .parquet(...)",
        "looks for _delta_log",
    ):
        assert what in found, what
    assert all("transform.py" in line for line in found.splitlines())  # nothing else outside lake/ is
