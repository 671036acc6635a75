"""Writes the reference parts of the docs from the code, so they cannot drift from it.

Four blocks, each between a ``<!-- generated: NAME ... -->`` line and an ``<!-- end generated: NAME -->`` line:

- ``config`` in docs/configuration.md: every key of the config classes (``queuelake.config.Config`` and the
  dataclasses it holds, walked with ``dataclasses.fields``), with its type and default. The meaning column is
  the one hand-written part: it is read back from the page and kept, and a new key gets a ``TODO`` there;
- ``commands`` in docs/commands.md: every command of the registry with its help, what it is besides a CLI
  command (a spark-submit job, graceful on SIGTERM), and every option of its argparse parser (the parser
  ``queuelake.cli.build_parser`` builds, so it is what ``queuelake CMD --help`` shows);
- ``command-table`` in README.md: one line per command, linking into docs/commands.md;
- ``layers`` in docs/architecture.md: the layers of ``tests/product/test_layers.py``'s ``LAYERS`` (read with
  ``ast``, not imported), the one list of them.

    python scripts/gen_reference.py           # rewrite the blocks
    python scripts/gen_reference.py --check   # exit 1, naming each stale block or missing meaning

``tests/product/test_reference_docs.py`` runs the check: adding a config key, a command or an option fails it
until this script has been run and the key's meaning written.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "lib") not in sys.path:
    sys.path.insert(0, str(REPO / "lib"))  # the tree's own library, as bench/_tree.py does

TODO = "TODO: say what this key does"
PIPE = re.compile(r"(?<!\\)\|")


# ---------------------------------------------------------------- blocks


def _begin(name: str) -> re.Pattern[str]:
    return re.compile(rf"^<!-- generated: {re.escape(name)}\b.*-->$", re.M)


def _end(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def block(text: str, name: str) -> str | None:
    """The text between the block's markers (without them), or None when the page has no such block."""
    begin = _begin(name).search(text)
    if begin is None:
        return None
    end = text.find(_end(name), begin.end())
    if end < 0:
        return None
    return text[begin.end() + 1 : end]


def with_block(text: str, name: str, body: str) -> str:
    begin = _begin(name).search(text)
    end = text.find(_end(name), begin.end()) if begin else -1
    if begin is None or end < 0:
        raise SystemExit(f"no '<!-- generated: {name} ... -->' ... '{_end(name)}' block to fill")
    return text[: begin.end() + 1] + body + text[end:]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{_cell(text)}`"


# ---------------------------------------------------------------- config keys


@dataclass(frozen=True)
class Key:
    name: str  # dotted, lists of sections as ``transforms[].name``
    type: str
    default: str


def _section_class(hint: Any) -> tuple[type, bool] | None:
    """The dataclass a field holds (itself, or a list of it), and whether it is a list."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint, False
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        return args[0], True
    return None


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _code(value)
    if isinstance(value, (list, tuple)) and not value:
        return "`[]`"
    if isinstance(value, dict) and not value:
        return "`{}`"
    return _code(repr(value))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return _value(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _value(f.default_factory())
    return "required"


def config_keys() -> list[Key]:
    """Every key a config file may hold, in the classes' order."""
    from queuelake.config import Config

    keys: list[Key] = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:  # set after loading (``TransportConfig.empty_variables``), no key of the file
                continue
            section = _section_class(hints[f.name])
            if section is not None:
                inner, many = section
                walk(inner, f"{prefix}{f.name}{'[].' if many else '.'}")
            else:
                keys.append(Key(f"{prefix}{f.name}", str(f.type), _default(f)))

    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        section = _section_class(hints[f.name])
        if section is not None:  # ``source`` (the file a config came from) is no key
            inner, many = section
            walk(inner, f"{f.name}{'[].' if many else '.'}")
    return keys


def meanings(body: str | None) -> dict[str, str]:
    """Key -> meaning, from a config table as this script writes it (the hand-written column)."""
    found: dict[str, str] = {}
    for line in (body or "").splitlines():
        cells = [c.strip() for c in PIPE.split(line.strip())]
        if len(cells) >= 6 and cells[1].startswith("`") and cells[1].endswith("`"):
            found[cells[1].strip("`")] = "|".join(cells[4:-1]).strip()
    return found


def render_config(known: dict[str, str]) -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in config_keys():
        meaning = known.get(key.name) or TODO
        lines.append(f"| `{key.name}` | {_code(key.type)} | {key.default} | {meaning} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- commands


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


COMMON = {"-h", "--version", "--debug", "--log-format"}  # every command takes them; the page's introduction says so


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A parser's own options and positionals, without help, --version, --debug and --log-format."""
    return [
        a for a in parser._actions if not COMMON & set(a.option_strings) and not isinstance(a, argparse._HelpAction)
    ]


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _metavar(action: argparse.Action) -> str:
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    if isinstance(action.metavar, str):
        return action.metavar
    return action.dest.upper()


def option_text(action: argparse.Action) -> str:
    if not action.option_strings:
        return _metavar(action)
    names = ", ".join(action.option_strings)
    return f"{names} {_metavar(action)}" if _takes_value(action) else names


def _option_default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    default = action.default
    if default in (None, False, argparse.SUPPRESS) or not _takes_value(action):
        return ""
    return _value(default)


def _synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    words = [f"queuelake {name}"]
    for action in options(parser):
        text = option_text(action).split(", ")[0] if action.option_strings else _metavar(action)
        if action.option_strings and _takes_value(action):
            text = f"{action.option_strings[0]} {_metavar(action)}"
        if isinstance(action, argparse._AppendAction):
            text += " ..."
        words.append(text if action.required or not action.option_strings else f"[{text}]")
    return " ".join(words)


def _groups(parser: argparse.ArgumentParser) -> list[str]:
    notes = []
    for group in parser._mutually_exclusive_groups:
        names = ", ".join(f"`{a.option_strings[-1]}`" for a in group._group_actions)
        notes.append(f"{'exactly' if group.required else 'at most'} one of {names}")
    return notes


def _traits(command: Any) -> str:
    traits = []
    if command.job:
        traits.append(
            f"also a spark-submit job (`jobs/{command.name}.py`) and a console script "
            f"(`queuelake-{command.name}`, a Databricks `python_wheel_task` entry point)"
        )
    if command.graceful:
        traits.append("a first SIGTERM, Ctrl-C or SIGHUP stops it at the next batch boundary, a second stops it now")
    if not command.takes_config:
        traits.append("reads no config file")
    return "; ".join(traits)


def render_commands() -> str:
    from queuelake.cli import build_parser
    from queuelake.commands.registry import COMMANDS

    parser = build_parser()
    out = ["Options every command takes, before or after its name:", "", "| option | does |", "|---|---|"]
    for action in options(parser):
        if not isinstance(action, argparse._SubParsersAction):
            out.append(f"| {_code(option_text(action))} | {_cell(action.help or '')} |")
    for action in parser._actions:
        if set(action.option_strings) & {"--version", "--debug", "--log-format"}:
            out.append(f"| {_code(option_text(action))} | {_cell(action.help or '')} |")
    for name, sub in _subparsers(parser).items():
        command = COMMANDS[name]
        out += ["", f"### `queuelake {name}`", "", f"{command.help[0].upper()}{command.help[1:]}.", ""]
        out += [f"    {_synopsis(name, sub)}", ""]
        traits = _traits(command)
        if traits:
            out += [f"{traits[0].upper()}{traits[1:]}.", ""]
        rows = options(sub)
        if rows:
            out += ["| option | default | does |", "|---|---|---|"]
            for action in rows:
                does = action.help or ""
                if isinstance(action, argparse._AppendAction) and "repeatable" not in does:
                    does += " (repeatable)"
                out.append(f"| {_code(option_text(action))} | {_option_default(action)} | {_cell(does)} |")
        for note in _groups(sub):
            out += ["", f"Give {note}."]
    return "\n".join(out) + "\n"


def render_command_table() -> str:
    from queuelake.commands.registry import COMMANDS

    lines = ["| command | does |", "|---|---|"]
    for name, command in COMMANDS.items():
        lines.append(f"| [`queuelake {name}`](docs/commands.md#queuelake-{name}) | {_cell(command.help)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- layers

LAYER_TEST = REPO / "tests" / "product" / "test_layers.py"


def layers() -> list[tuple[str, list[list[str]]]]:
    """``LAYERS`` of the layer test, read from its source (a literal), top to bottom."""
    tree = ast.parse(LAYER_TEST.read_text(encoding="utf-8"), str(LAYER_TEST))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "LAYERS":
            return ast.literal_eval(value)
    raise SystemExit(f"{LAYER_TEST} assigns no LAYERS")


def render_layers() -> str:
    lines = ["| | layer | modules (under `queuelake.`) |", "|---|---|---|"]
    for i, (name, parts) in enumerate(layers(), 1):
        modules = " \\| ".join(", ".join(f"`{m}`" for m in part) for part in parts)
        lines.append(f"| {i} | {_cell(name)} | {modules} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the pages


@dataclass(frozen=True)
class Block:
    page: str
    name: str
    render: Callable[[str | None], str]  # the block's current text in, its new text out


BLOCKS = [
    Block("docs/configuration.md", "config", lambda now: render_config(meanings(now))),
    Block("docs/commands.md", "commands", lambda now: render_commands()),
    Block("README.md", "command-table", lambda now: render_command_table()),
    Block("docs/architecture.md", "layers", lambda now: render_layers()),
]


def problems(repo: Path = REPO) -> list[str]:
    """What is stale: each block that differs from what the code gives, and each key without a meaning."""
    found = []
    for b in BLOCKS:
        text = (repo / b.page).read_text(encoding="utf-8")
        now = block(text, b.name)
        if now is None:
            found.append(f"{b.page}: no '{b.name}' block")
            continue
        if now != b.render(now):
            found.append(f"{b.page}: the '{b.name}' block is stale: run python scripts/gen_reference.py")
    config = block((repo / "docs/configuration.md").read_text(encoding="utf-8"), "config") or ""
    for key, meaning in meanings(config).items():
        if not meaning or meaning.startswith("TODO"):
            found.append(f"docs/configuration.md: write the meaning of {key}")
    return found


def write(repo: Path = REPO) -> list[str]:
    changed = []
    for b in BLOCKS:
        path = repo / b.page
        text = path.read_text(encoding="utf-8")
        new = with_block(text, b.name, b.render(block(text, b.name)))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(b.page)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    for page in write():
        print(f"wrote {page}")
    todo = [p for p in problems() if "write the meaning" in p]
    for line in todo:
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
