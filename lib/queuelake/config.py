"""Deployment configuration: one YAML file, strict keys, ``${VAR}`` from the environment.

Strictness is the point: a misspelt key silently ignored means a job that drains the wrong queues,
so unknown keys and missing variables are errors that name them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from queuelake.errors import ConfigError

DEFAULT_CONFIG = "conf/local.yaml"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class TransportConfig:
    dialect: str = "postgresql"
    driver: str = "psycopg"
    connection: str | None = None
    default_schema: str | None = None
    default_catalog: str | None = None
    subscription_table: str = "SubscriptionRouting"
    ledger_table: str = "queuelake_publish_ledger"
    # the drain's durable claims: one row per batch between its DELETE and its Delta commit
    claims_table: str = "queuelake_drain_claims"
    # data folder of a throwaway PostgreSQL (pgserver) started when connection is empty
    embedded: str | None = None

    def __post_init__(self) -> None:
        if self.dialect not in ("postgresql", "sqlserver"):
            raise ConfigError(f"transport.dialect must be postgresql or sqlserver, not {self.dialect!r}")
        if self.driver not in ("psycopg", "pyodbc", "adbc"):
            raise ConfigError(f"transport.driver must be psycopg, pyodbc or adbc, not {self.driver!r}")
        if self.dialect == "sqlserver" and self.driver != "pyodbc":
            raise ConfigError("transport.driver must be pyodbc for the sqlserver dialect")
        if self.driver == "adbc" and self.dialect != "postgresql":
            raise ConfigError("transport.driver adbc is for the postgresql dialect")
        if self.default_schema is None:
            self.default_schema = "public" if self.dialect == "postgresql" else "dbo"
        if self.embedded and self.dialect != "postgresql":
            raise ConfigError("transport.embedded is a PostgreSQL server; set transport.dialect: postgresql")
        if self.default_catalog is not None and self.dialect != "sqlserver":
            raise ConfigError("transport.default_catalog applies to the sqlserver dialect only")


@dataclass
class LakeConfig:
    root: str = "./lake"
    engine: str = "auto"

    def __post_init__(self) -> None:
        if self.engine not in ("auto", "delta-spark", "delta-rs"):
            raise ConfigError(f"lake.engine must be auto, delta-spark or delta-rs, not {self.engine!r}")


@dataclass
class SparkConfig:
    master: str = "local[2]"
    app_name: str = "queuelake"
    conf: dict[str, str] = field(default_factory=dict)


@dataclass
class DrainConfig:
    queues: list[str] = field(default_factory=list)
    batch_size: int = 10000
    workers_per_queue: int = 2
    max_messages: int | None = None
    max_seconds: float | None = None
    # auto: ADBC (Arrow straight from PostgreSQL, ~4x less CPU per row) when the dialect is
    # postgresql and adbc-driver-postgresql is installed; else the transport's driver
    receive_driver: str = "auto"
    # after an empty receive, how long to keep retrying while other sessions still hold rows
    # (a competing endpoint's open transaction) before reporting them as left behind
    settle_seconds: float = 5.0
    # bounds on the drain's own sessions, so a dead or hung drain cannot hold queue rows
    statement_timeout_seconds: float = 300.0
    idle_in_transaction_timeout_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.settle_seconds < 0:
            raise ConfigError("drain.settle_seconds must be 0 or more")
        if self.statement_timeout_seconds <= 0 or self.idle_in_transaction_timeout_seconds <= 0:
            raise ConfigError("drain.statement_timeout_seconds and idle_in_transaction_timeout_seconds must be > 0")
        if self.receive_driver not in ("auto", "adbc", "psycopg", "pyodbc"):
            raise ConfigError(
                f"drain.receive_driver must be auto, adbc, psycopg or pyodbc, not {self.receive_driver!r}"
            )
        if self.batch_size < 1:
            raise ConfigError("drain.batch_size must be at least 1")
        if self.workers_per_queue < 1:
            raise ConfigError("drain.workers_per_queue must be at least 1")


@dataclass
class TransformConfig:
    name: str
    output: str
    function: str | None = None
    sql: str | None = None

    def __post_init__(self) -> None:
        if (self.function is None) == (self.sql is None):
            raise ConfigError(f"transform {self.name!r}: give exactly one of function or sql")


@dataclass
class PublishConfig:
    endpoint: str = "Lakehouse"
    outputs: list[str] = field(default_factory=list)
    batch_size: int = 5000

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("publish.batch_size must be at least 1")


@dataclass
class Config:
    transport: TransportConfig = field(default_factory=TransportConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    transforms: list[TransformConfig] = field(default_factory=list)
    publish: PublishConfig = field(default_factory=PublishConfig)
    source: str | None = None  # the file it came from, for messages


_SECTIONS: dict[str, type] = {
    "transport": TransportConfig,
    "lake": LakeConfig,
    "spark": SparkConfig,
    "drain": DrainConfig,
    "publish": PublishConfig,
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


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    try:
        return cls(**data)
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"{where}: {exc}") from None


def from_dict(data: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str | None = None) -> Config:
    """Build a Config from parsed YAML; used by tests and by load()."""
    env = os.environ if env is None else env
    where = source or "config"
    data = expand_env(dict(data or {}), env, where)
    known = set(_SECTIONS) | {"transforms"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    sections = {name: _build(cls, data.get(name), f"{where}: {name}") for name, cls in _SECTIONS.items()}
    raw_transforms = data.get("transforms") or []
    if not isinstance(raw_transforms, list):
        raise ConfigError(f"{where}: transforms must be a list")
    transforms = [_build(TransformConfig, t, f"{where}: transforms[{i}]") for i, t in enumerate(raw_transforms)]
    spark_conf = sections["spark"].conf
    sections["spark"].conf = {str(k): str(v) for k, v in (spark_conf or {}).items()}
    return Config(**sections, transforms=transforms, source=source)


def load(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read a YAML config file (default ``conf/local.yaml``)."""
    file = Path(path or DEFAULT_CONFIG)
    if not file.is_file():
        raise ConfigError(f"config file {file} does not exist")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: invalid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    config = from_dict(data or {}, env=env, source=str(file))
    return config
