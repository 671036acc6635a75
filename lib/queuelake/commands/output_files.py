"""Files a command writes where its options say (``health --metrics``, ``failures --where-out``,
``conversation --out``): the path checked before the command's work, the file replaced whole.

Why a module of its own: a mistyped folder failed as an ``unexpected`` error with Python's own text
after the command's work was done (health had written its tables), or made the folders it named
(``conversation --out /nonexistent/x.svg`` created ``/nonexistent``); and node_exporter's textfile
collector, which ``health --metrics`` feeds, may read a file while it is written: it must appear whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from queuelake.errors import ArgumentError


def checked(option: str, value: str) -> Path:
    """``value`` as the file ``option`` names: its folder exists, and it is not a folder itself."""
    path = Path(value)
    folder = path.parent
    if path.is_dir():
        raise ArgumentError(f"{option} {value}: is a folder; give a file's path")
    if not folder.is_dir():
        raise ArgumentError(f"{option} {value}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ArgumentError(f"{option} {value}: the folder {folder} is not writable")
    return path


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path``, replacing it at once: written beside it, then renamed over it (a reader
    sees the old file or the new one, never half of one)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
