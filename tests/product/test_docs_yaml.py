"""Every YAML block of the README and ``docs/`` is a config ``queuelake`` accepts, merged into a minimal
one (a connection and a lake root): a user copies them. Found by a review: docs/drain.md's own
``drain: {on: processes}`` was refused, YAML 1.1 reading the key ``on`` as the boolean true
(``config.read_yaml`` keeps keys as written)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from queuelake.config import from_dict, read_yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = {"transport": {"connection": "postgresql://user@host/db"}, "lake": {"root": "/tmp/lake"}}
BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.S)
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


def _merged(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(into)
    for key, value in more.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


BLOCKS = _blocks()


def test_the_docs_have_yaml_blocks() -> None:
    assert len(BLOCKS) >= 5, BLOCKS


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_a_yaml_block_of_the_docs_is_a_config_queuelake_accepts(where: str, block: str) -> None:
    data = read_yaml(block)
    assert isinstance(data, dict), f"{where}: not a mapping"
    # each variable a value of its kind: a lake root is no database URI (a root's scheme is checked)
    env = {name: "/data/lake" if "ROOT" in name else "postgresql://user@host/db" for name in VARIABLE.findall(block)}
    from_dict(_merged(BASE, data), env=env)


def test_keys_stay_as_written_and_values_keep_yaml_booleans() -> None:
    assert read_yaml("drain: {on: processes}\nyes: no\n") == {"drain": {"on": "processes"}, "yes": False}
