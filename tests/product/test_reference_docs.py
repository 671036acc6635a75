"""The docs a newcomer reads match the code: every config key, command and option is documented, the layer list
is the layer test's, and every link leads somewhere.

Why: the README had grown into a 2,115-line logbook whose copies drifted (the layer list existed three times,
two of them different). Now the references are generated from the code by ``scripts/gen_reference.py``
(the config classes, the command registry and its parser, ``LAYERS``); this test regenerates them and fails
on any difference, naming what to do: run the script, and write a new key's meaning.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
MOST_README_LINES = 250


def _generator() -> ModuleType:
    """``scripts/gen_reference.py``, loaded from its file (``scripts/`` is no package)."""
    path = REPO / "scripts" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("queuelake_scripts_gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gen = _generator()


def _page(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def test_the_generated_references_match_the_code() -> None:
    """Each generated block equals what the code gives now, and every config key has a meaning."""
    problems = gen.problems()
    assert problems == [], "\n".join(problems)


def test_every_config_key_is_documented() -> None:
    page = _page("docs/configuration.md")
    table = gen.block(page, "config") or ""
    keys = [key.name for key in gen.config_keys()]
    assert "drain.queues" in keys and "transforms[].name" in keys and "lake.retention.rules[].days" in keys
    missing = [key for key in keys if f"| `{key}` |" not in table]
    assert missing == [], f"docs/configuration.md lacks {missing}: run python scripts/gen_reference.py"
    documented = list(gen.meanings(table))
    assert documented == keys, "docs/configuration.md lists keys the config classes do not have"
    undescribed = [key for key, meaning in gen.meanings(table).items() if not meaning or meaning.startswith("TODO")]
    assert undescribed == [], f"write the meaning of {undescribed} in docs/configuration.md"


def _sections(page: str) -> dict[str, str]:
    """``### `queuelake NAME``` section -> its text, from docs/commands.md."""
    parts = re.split(r"^### `queuelake ([a-z-]+)`$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_command_and_option_is_documented() -> None:
    from queuelake.cli import build_parser
    from queuelake.commands.registry import COMMANDS

    page = _page("docs/commands.md")
    sections = _sections(gen.block(page, "commands") or "")
    assert list(sections) == list(COMMANDS), "docs/commands.md: run python scripts/gen_reference.py"
    table = gen.block(_page("README.md"), "command-table") or ""
    for name in COMMANDS:
        assert f"[`queuelake {name}`](docs/commands.md#queuelake-{name})" in table, f"README lacks {name}"
    parsers = gen._subparsers(build_parser())
    assert set(parsers) == set(COMMANDS)
    for name, parser in parsers.items():
        for action in gen.options(parser):
            shown = action.option_strings or [gen._metavar(action)]
            for option in shown:
                assert f"`{option}" in sections[name] or f" {option}" in sections[name], (
                    f"docs/commands.md does not document {name} {option}: run python scripts/gen_reference.py"
                )


def test_the_global_options_are_documented() -> None:
    from queuelake.cli import build_parser

    block = gen.block(_page("docs/commands.md"), "commands") or ""
    for action in build_parser()._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            assert f"`{action.option_strings[-1]}" in block, action.option_strings


def _layers_in(page: str) -> list[tuple[str, list[list[str]]]]:
    """The layer table of docs/architecture.md read back: (name, parts of module patterns), top to bottom."""
    found = []
    for line in (gen.block(page, "layers") or "").splitlines():
        cells = [c.strip() for c in gen.PIPE.split(line.strip())]
        if len(cells) == 5 and cells[1].isdigit():
            assert int(cells[1]) == len(found) + 1, line
            parts = [re.findall(r"`([^`]+)`", part) for part in cells[3].split("\\|")]
            found.append((cells[2].replace("\\|", "|"), parts))
    return found


def test_the_layer_list_in_architecture_md_is_the_layer_tests() -> None:
    """docs/architecture.md's one layer list equals ``LAYERS`` of tests/product/test_layers.py, layer by
    layer and module pattern by pattern; no other page repeats it."""
    layers = gen.layers()
    assert layers and layers[0][0] == "entry points" and layers[-1][0] == "base"
    assert _layers_in(_page("docs/architecture.md")) == layers
    pages = [README, *DOCS.glob("*.md")]
    repeating = [p.name for p in pages if p.name != "architecture.md" and "generated: layers" in p.read_text("utf-8")]
    assert repeating == []
    assert "(docs/architecture.md)" in _page("README.md")


def test_the_readme_is_short_and_holds_no_history() -> None:
    text = _page("README.md")
    assert len(text.splitlines()) <= MOST_README_LINES
    assert re.findall(r"\b[Rr]ound \d+", text) == [], "the rounds' history belongs in CHANGELOG.md"
    for command in ("make demo", "make test", "make test-fast", "make lint"):
        assert command in text, command
    for status in ("tested for real", "parse-only"):
        assert status in text, status


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))])
def test_every_link_leads_somewhere(page: str) -> None:
    """Relative links name a file that exists and, with ``#anchor``, a heading it has."""
    path = REPO / page
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert broken == [], f"{page}: {broken}"


def test_the_table_in_more_words_names_every_option() -> None:
    """Each row of commands.md's "in more words" table names its command's every option, as its usage
    line (a review: the table had fallen behind the parser, ``replay --where-file`` and five more absent)."""
    from queuelake.cli import build_parser

    page = _page("docs/commands.md")
    table = page.split("## What each does, in more words", 1)[1].split("\n## ", 1)[0]
    usages = {
        m.group(1): m.group(0) for m in re.finditer(r"^\| `queuelake ([a-z-]+)[^|]*?(?:\\\|[^|]*?)*` \|", table, re.M)
    }
    parsers = gen._subparsers(build_parser())
    assert set(usages) == set(parsers), sorted(set(parsers) ^ set(usages))
    missing = [
        f"{name} {option}"
        for name, parser in parsers.items()
        for action in gen.options(parser)
        for option in action.option_strings[-1:]
        if option.startswith("--") and option != "--config" and option not in usages[name]
    ]
    assert missing == [], f"docs/commands.md's table in more words lacks {missing}"
