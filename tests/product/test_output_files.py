"""The files commands write where their options say (``commands/output_files.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from queuelake.commands import output_files
from queuelake.errors import ArgumentError


def test_a_mistyped_output_path_is_an_arguments_error_naming_the_option(tmp_path: Path) -> None:
    assert output_files.checked("--out", str(tmp_path / "x.svg")) == tmp_path / "x.svg"
    with pytest.raises(ArgumentError, match=r"--out .*: the folder .*nope does not exist"):
        output_files.checked("--out", str(tmp_path / "nope" / "x.svg"))
    assert not (tmp_path / "nope").exists()  # no folder made for a typo (a review: /nonexistent was)
    with pytest.raises(ArgumentError, match=r"--metrics .*: is a folder"):
        output_files.checked("--metrics", str(tmp_path))


def test_a_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "gauges.prom"
    target.write_text("old\n")
    output_files.write_whole(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["gauges.prom"]  # nothing left beside it
