"""The place a notebook runs in, and where its output goes.

The notebooks are Databricks-source files that also run as plain Python (locally, and in
``tests/product/test_notebooks.py``). Databricks predefines ``dbutils``, ``spark`` and ``display`` in the
notebook's own namespace only, not in modules it imports, so each notebook hands them to ``Notebook``;
elsewhere they are None and the same calls fall back to environment variables, a local Spark session and
printed tables, and plots are saved as PNG files (``./notebook-output`` unless QUEUELAKE_NOTEBOOK_OUTPUT
says otherwise) instead of shown. Nothing Databricks-only is imported here, and matplotlib (the
``notebooks`` extra) only when a plot is drawn.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from queuelake.lake.engines import open_lake as _open_lake
from queuelake.notebooks.tables import table_text, typed_table

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.config import Config
    from queuelake.config_sections import LakeConfig
    from queuelake.lake.port import LakeEngine

# Where plots go when nothing says otherwise and no notebook front end shows them (relative to the current folder).
DEFAULT_OUTPUT = "notebook-output"


def _in_jupyter() -> bool:
    """True inside a Jupyter (IPython kernel) session, where ``plt.show()`` draws inline."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


# the jobs' config file, read for the lake's storage options and the session's settings (``open_lake``)
CONFIG_ENV = "QUEUELAKE_CONFIG"


def lake_config(notebook: LakeConfig, jobs: LakeConfig, env: Mapping[str, str]) -> LakeConfig:
    """The lake a notebook reads given the jobs' config: its root unless ``QUEUELAKE_LAKE_ROOT`` names
    another, its storage options (an ``s3://`` root's credentials and endpoint), the notebook's engine.
    Why: on object storage a notebook had only a root, and failed at its first read (a review)."""
    root = env.get("QUEUELAKE_LAKE_ROOT") or jobs.root
    return dataclasses.replace(jobs, root=root, engine=notebook.engine)


def _lake_and_spark(path: str) -> Config:
    """The config file's ``lake`` and ``spark`` sections alone: a notebook needs no queue database, and
    its connection's variable need not be set where the notebook runs."""
    from pathlib import Path

    from queuelake.config import from_dict, read_yaml
    from queuelake.errors import ConfigError

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{CONFIG_ENV}={path}: no such config file")
    data = read_yaml(file.read_text(encoding="utf-8")) or {}
    return from_dict({k: data[k] for k in ("lake", "spark") if k in data}, source=str(file))


class Notebook:
    """The place a notebook runs in: Databricks (its ``dbutils``, ``spark`` and ``display`` passed in) or
    elsewhere (all None). The notebook's code is then the same in both."""

    def __init__(
        self, *, dbutils: Any = None, spark: SparkSession | None = None, display: Callable[[Any], Any] | None = None
    ) -> None:
        self.dbutils = dbutils
        self.spark = spark
        self.display = display
        self.output = self._plot_folder()
        if self.output:
            import matplotlib.pyplot as plt

            plt.switch_backend("Agg")  # no display needed to draw
            print(
                f"plots: saved as PNG files under {os.path.abspath(self.output)} "
                "(QUEUELAKE_NOTEBOOK_OUTPUT names another folder, or 'show' to show them)"
            )
        self.lake: LakeEngine | None = None
        self.lake_root = ""

    def _plot_folder(self) -> str | None:
        """The folder plots are saved in, or None to show them. Databricks and Jupyter show plots under the
        cell; run as a script (``python notebooks/journal_overview.py``) a plot window would block or, without
        a display, draw nothing at all, so the pictures go to ``./notebook-output``. QUEUELAKE_NOTEBOOK_OUTPUT
        overrides both: a folder (scheduled runs, tests), or ``show``."""
        configured = os.environ.get("QUEUELAKE_NOTEBOOK_OUTPUT", "").strip()
        if configured:
            return None if configured == "show" else configured
        if self.dbutils is not None or os.environ.get("DATABRICKS_RUNTIME_VERSION") or _in_jupyter():
            return None
        return DEFAULT_OUTPUT

    def param(self, name: str, default: str, choices: Sequence[str] | None = None) -> str:
        """A widget on Databricks, so that a job's parameters or a person can set it; elsewhere the environment
        variable QUEUELAKE_<NAME>, else the default. The environment also presets the widget."""
        value = os.environ.get(f"QUEUELAKE_{name.upper()}", default)
        if self.dbutils is None:
            return value
        if choices:
            self.dbutils.widgets.dropdown(name, value if value in choices else default, choices)
        else:
            self.dbutils.widgets.text(name, value)
        return self.dbutils.widgets.get(name)

    def open_lake(self, config: LakeConfig, with_spark: bool = True) -> LakeEngine:
        """Open the lake with Databricks' session when there is one (never a second one beside it), else a
        local one, and say which lake and engine the notebook reads. Off Databricks, ``QUEUELAKE_CONFIG``
        (the jobs' config file) gives the lake's storage options and the session's settings
        (``lake_config``). ``with_spark`` False: a notebook that reads its tables as Arrow starts none
        (delta-rs reads)."""
        configured = None if self.dbutils is not None else os.environ.get(CONFIG_ENV, "").strip() or None
        spark_settings = None
        if configured:
            jobs = _lake_and_spark(configured)
            config, spark_settings = lake_config(config, jobs.lake, os.environ), jobs.spark
        if self.spark is None and with_spark:
            from queuelake.spark import get_spark

            self.spark = get_spark(spark_settings)
        self.lake = _open_lake(config, self.spark)
        self.lake_root = config.root
        print(f"lake {config.root} ({self.lake.name})")
        return self.lake

    def read_table(self, name: str) -> DataFrame | None:
        """The lake table as a DataFrame, or None (with a note) when it is missing or empty: a new or partly
        filled lake shows notes instead of failing."""
        if self.lake is None:
            raise RuntimeError("open the lake first (Notebook.open_lake)")
        if not self.lake.exists(name):
            print(f"note: no lake table {name!r} under {self.lake_root}")
            return None
        df = self.lake.read(name)
        if df.isEmpty():
            print(f"note: lake table {name!r} is empty")
            return None
        return df

    def show_table(self, pdf: pd.DataFrame, title: str) -> None:
        """Databricks' interactive table when there is one (typed, so that it still sorts: counts as integers,
        times in UTC), else the table as text (``table_text``); the title printed either way, so the output
        reads in order."""
        print(f"\n{title}")
        if self.display is not None:
            self.display(typed_table(pdf))
        else:
            print(table_text(pdf))

    def save_or_show(self, fig: Figure, name: str) -> None:
        """Show the plot, or with an output folder save it there as ``<name>.png`` and free its memory."""
        import matplotlib.pyplot as plt

        fig.tight_layout()
        if self.output:
            os.makedirs(self.output, exist_ok=True)
            path = os.path.join(self.output, f"{name}.png")
            fig.savefig(path, dpi=100)
            plt.close(fig)
            print(f"saved {os.path.abspath(path)}")
        else:
            plt.show()
