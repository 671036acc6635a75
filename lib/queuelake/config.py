"""Deployment configuration: one YAML file, strict keys, ``${VAR}`` from the environment.

Strictness is the point: a misspelt key silently ignored means a job that drains the wrong queues,
so unknown keys and missing variables are errors that name them. This module reads the file, fills
the variables, builds the sections (``config_sections.py``: each section's keys, defaults and own
checks) and checks what spans sections: a queue both drained and sent to.

Every layer reads its settings from here, so the config modules import only ``errors`` and the dialect
objects (``dialects/dialect.py``, ``dialects/address.py``: pure rules, no settings), never the
transport's modules that take a ``TransportConfig`` (``tests/product/test_layers.py`` checks it).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from queuelake.config_sections import (
    BodiesConfig,
    DrainConfig,
    LakeConfig,
    PublishConfig,
    ReplayConfig,
    SparkConfig,
    TransformConfig,
    TransportConfig,
    build_section,
)
from queuelake.dialects.dialect import dialect as named_dialect
from queuelake.errors import ConfigError

DEFAULT_CONFIG = "conf/local.yaml"
CONFIG_ENV = "QUEUELAKE_CONFIG"  # the config file when no -c is given (a scheduler's environment)
# the built-in local config is used without -c only where an embedded database already is (a demo's)
EMBEDDED_DATA = ".queuelake/pgdata"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class Config:
    transport: TransportConfig = field(default_factory=TransportConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    transforms: list[TransformConfig] = field(default_factory=list)
    publish: PublishConfig = field(default_factory=PublishConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    bodies: BodiesConfig = field(default_factory=BodiesConfig)
    source: str | None = None  # the file it came from, for messages


_SECTIONS: dict[str, type] = {
    "transport": TransportConfig,
    "lake": LakeConfig,
    "spark": SparkConfig,
    "drain": DrainConfig,
    "publish": PublishConfig,
    "replay": ReplayConfig,
    "bodies": BodiesConfig,
}


def expand_env(value: Any, env: Mapping[str, str], where: str) -> Any:
    """Replace ``${VAR}`` in every string; a variable that is not set is an error naming it."""
    if isinstance(value, str):

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return env[name]

        return _VAR.sub(repl, value)
    if isinstance(value, list):
        return [expand_env(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: expand_env(v, env, f"{where}.{k}") for k, v in value.items()}
    return value


def _connection_of(data: Mapping[str, Any] | None) -> Any:
    transport = (data or {}).get("transport")
    return transport.get("connection") if isinstance(transport, Mapping) else None


def _emptied_by(raw: Any, connection: Any) -> tuple[str, ...]:
    """The variables of the connection's text (``raw``) when they left it empty (``QUEUELAKE_CONNECTION=""``).
    Not an error here: lake-only commands (``find``, ``maintain``, ``failures``) run without a queue database
    (a check at load failed every one of them); a command that opens it names them (``db.connect``)."""
    if not isinstance(raw, str) or (isinstance(connection, str) and connection.strip()):
        return ()
    return tuple(dict.fromkeys(_VAR.findall(raw)))


def from_dict(data: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str | None = None) -> Config:
    """Build a Config from parsed YAML; used by tests and by load()."""
    env = os.environ if env is None else env
    where = source or "config"
    raw_connection = _connection_of(data)
    data = expand_env(dict(data or {}), env, where)
    known = set(_SECTIONS) | {"transforms"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    sections = {name: build_section(cls, data.get(name), f"{where}: {name}") for name, cls in _SECTIONS.items()}
    sections["transport"].empty_variables = _emptied_by(raw_connection, _connection_of(data))
    raw_transforms = data.get("transforms") or []
    if not isinstance(raw_transforms, list):
        raise ConfigError(f"{where}: transforms must be a list")
    transforms = [build_section(TransformConfig, t, f"{where}: transforms[{i}]") for i, t in enumerate(raw_transforms)]
    spark_conf = sections["spark"].conf
    # a setting left empty (``key:``) is dropped, as in lake.storage_options: not the text "None"
    sections["spark"].conf = {str(k): str(v) for k, v in (spark_conf or {}).items() if v is not None}
    config = Config(**sections, transforms=transforms, source=source)
    check_destinations(config)
    check_outputs(config)
    return config


def load(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read a YAML config file. Without a path: ``$QUEUELAKE_CONFIG``, else ``conf/local.yaml`` when it
    exists, else the local embedded config the package ships (``queuelake.local_config``), but
    only where its database already is (``.queuelake/pgdata``, as ``queuelake demo`` leaves it): a
    forgotten ``-c`` elsewhere fails in one line (it used to create a database and report "ok" on its
    empty queues). An explicit path must exist."""
    environ = os.environ if env is None else env
    if path is None and environ.get(CONFIG_ENV):
        path = environ[CONFIG_ENV]
    if path is None and not Path(DEFAULT_CONFIG).is_file():
        from queuelake.local_config import LOCAL_YAML, SOURCE

        if not Path(EMBEDDED_DATA).is_dir():
            # a forgotten -c must not quietly start a database here and report on its empty queues
            raise ConfigError(
                f"no config: pass -c FILE (or set {CONFIG_ENV}); start from conf/postgres.example.yaml, "
                f"or run `queuelake demo` to try queuelake on an embedded database"
            )
        log = logging.getLogger("queuelake")
        log.info("no %s here: using the built-in local config (%s) over %s", DEFAULT_CONFIG, SOURCE, EMBEDDED_DATA)
        return from_dict(read_yaml(LOCAL_YAML), env=env, source=SOURCE)
    file = Path(path or DEFAULT_CONFIG)
    if file.is_dir():
        raise ConfigError(f"config file {file} is a folder (pass the config file itself with -c FILE)")
    if not file.is_file():
        templates = sorted(str(t) for t in file.parent.glob("*.example.yaml")) if file.parent.is_dir() else []
        start = f"; start from {' or '.join(templates)}" if templates else ""
        raise ConfigError(f"config file {file} does not exist (pass the right one with -c FILE{start})")
    try:
        data = read_yaml(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: invalid YAML: {exc}") from None
    except UnicodeDecodeError:  # a binary file given by mistake: a config error, not "unexpected" (a review)
        raise ConfigError(f"{file}: not UTF-8 text; a config file is YAML") from None
    except OSError as exc:  # unreadable (permissions): named, the reason in the system's words
        raise ConfigError(f"{file}: cannot read it ({exc.strerror or exc})") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    config = from_dict(data or {}, env=env, source=str(file))
    _announce(file)
    return config


class _KeysAsWritten(yaml.SafeLoader):
    """YAML as ``safe_load`` reads it, but a mapping's key is the text written: YAML 1.1 reads an unquoted
    ``on``, ``off``, ``yes``, ``no`` as a boolean, and ``drain: {on: processes}`` (docs/drain.md's own
    example) became ``{True: processes}``, refused as an unknown key. Values keep YAML 1.1's booleans
    (``include_failed: yes`` is still true)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        for i, (key, value) in enumerate(node.value):
            if isinstance(key, yaml.ScalarNode) and key.tag == "tag:yaml.org,2002:bool":
                text = yaml.ScalarNode("tag:yaml.org,2002:str", key.value, key.start_mark, key.end_mark)
                node.value[i] = (text, value)
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    """A config file's YAML (``_KeysAsWritten``)."""
    return yaml.load(text, Loader=_KeysAsWritten)  # noqa: S506 - a SafeLoader


_ANNOUNCED: set[Path] = set()


def _announce(file: Path) -> None:
    """Say which config a command read, once per process (a command may load it twice): a
    scheduler's log then shows what a run was configured by."""
    path = file.resolve()
    if path not in _ANNOUNCED:
        _ANNOUNCED.add(path)
        logging.getLogger("queuelake").info("config: %s", path)


def _canonical(name: str, transport: TransportConfig) -> str:
    """A queue's canonical address, so ``Billing`` and ``"public"."Billing"`` compare equal: what
    ``transport.table_refs.queue_ref(name, transport).canonical`` gives, asked of the dialect directly,
    because the transport's modules take their settings from this one (config is below them)."""
    rules = named_dialect(transport.dialect)
    return rules.format(rules.resolve(name, transport.default_schema, transport.default_catalog))


def drained_as(config: Config, address: str) -> str | None:
    """The ``drain.queues`` entry that drains ``address`` unless ``drain.also_destinations`` allows
    sending there; None when sending to it is safe."""
    t = config.transport
    target = _canonical(address, t)
    allowed = {_canonical(q, t) for q in config.drain.also_destinations}
    if target in allowed:
        return None
    return next((q for q in config.drain.queues if _canonical(q, t) == target), None)


def conflict_message(drained: str, destination: str, where: str) -> str:
    """Names both places: the drain entry and what sends to the same queue."""
    return (
        f"drain.queues drains {drained}, which {where} sends to: the next drain would take every message sent "
        f"there into the lake before the {drained} endpoint receives it. Drain another queue (an audit copy, "
        f"say), send elsewhere, or, if this is intended, add {drained} to drain.also_destinations"
    )


def check_send_target(config: Config, address: str, where: str) -> None:
    """Refuse to send to a drained queue (``replay --to``, a subscriber found at publish time);
    ``where`` names the sender in the error, e.g. ``replay --to`` or ``subscription (Billing, topic)``."""
    drained = drained_as(config, address)
    if drained is not None:
        raise ConfigError(f"{config.source or 'config'}: {conflict_message(drained, address, where)}")


def check_queues_named(config: Config, names: list[str]) -> None:
    """Queues named for one drain (``--queue``) in place of ``drain.queues``: each must pass the check
    ``drain.queues`` passes (``check_destinations``). Why: ``drain --queue Billing`` took every message
    the demo had published to Billing into the lake, exit 0, where Billing in ``drain.queues`` is refused
    (a review)."""
    t = config.transport
    allowed = {_canonical(q, t) for q in config.drain.also_destinations}
    for name in names:
        target = _canonical(name, t)
        if target in allowed:
            continue
        for i, transform in enumerate(config.transforms):
            if any(_canonical(d, t) == target for d in transform.destinations):
                where = f"transforms[{i}] ({transform.name}).destinations"
                message = conflict_message(name, name, where).replace("drain.queues drains", "--queue drains", 1)
                # also_destinations takes drained queues only: the advice names both keys (a review: the
                # advice alone failed with "not in drain.queues")
                message = message.replace(
                    f"add {name} to drain.also_destinations", f"add {name} to drain.queues and drain.also_destinations"
                )
                raise ConfigError(f"{config.source or 'config'}: {message}")


def check_outputs(config: Config) -> None:
    """Each transform has a name and an output of its own, and publish names each output once. A transform
    block copied with only its name changed read the whole journal again into the first one's output, and
    publish sent those rows again (a review): a transform's checkpoint is its own, the output's rows not."""
    where = config.source or "config"
    names: dict[str, int] = {}
    outputs: dict[str, str] = {}
    for i, transform in enumerate(config.transforms):
        if transform.name in names:
            raise ConfigError(
                f"{where}: transforms[{names[transform.name]}] and [{i}] are both named {transform.name!r}"
            )
        names[transform.name] = i
        if transform.output in outputs:
            raise ConfigError(
                f"{where}: transforms {outputs[transform.output]!r} and {transform.name!r} both write "
                f"{transform.output}: give each transform an output of its own"
            )
        outputs[transform.output] = transform.name
    repeated = sorted({o for o in config.publish.outputs if config.publish.outputs.count(o) > 1})
    if repeated:
        raise ConfigError(f"{where}: publish.outputs names {', '.join(repeated)} more than once")


def check_destinations(config: Config) -> None:
    """Validation across sections: a queue that is both drained and a destination the config names
    (a transform's ``destinations``) is an error naming both places, unless ``drain.also_destinations``
    says it is intended (one run published to Billing, the next drain took it all into the lake).
    ``also_destinations`` entries must be drained queues, so a typo there cannot pass silently."""
    where = config.source or "config"
    t = config.transport
    drained = {_canonical(q, t) for q in config.drain.queues}
    stray = [q for q in config.drain.also_destinations if _canonical(q, t) not in drained]
    if stray:
        raise ConfigError(f"{where}: drain.also_destinations lists {', '.join(stray)}, not in drain.queues")
    for i, transform in enumerate(config.transforms):
        for destination in transform.destinations:
            check_send_target(config, destination, f"transforms[{i}] ({transform.name}).destinations")
