"""Resolved references to the tables queuelake touches: queues, delayed stores, bridge tables.

A ``TableRef`` carries an address with the configured defaults applied and knows how to present it
to the SQL files: quoted identifiers for ``{placeholders}``, plain strings only as bound parameters.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from queuelake.config import TransportConfig
from queuelake.transport import address as addr
from queuelake.transport.address import QueueAddress


@dataclass(frozen=True)
class TableRef:
    address: QueueAddress
    dialect: str

    @functools.cached_property
    def canonical(self) -> str:
        """The canonical queue address, as the journal's ``queue`` column records it."""
        return addr.format_address(self.address, self.dialect)

    @functools.cached_property
    def qualified(self) -> str:
        return addr.qualified_name(self.address, self.dialect)

    @property
    def table(self) -> str:
        return self.address.table

    def identifiers(self) -> dict[str, str]:
        q = addr.quote_identifier
        a = self.address
        ids = {"queue": self.qualified, "table": self.qualified}
        if self.dialect == "postgresql":
            ids["schema"] = q(a.schema or "public", self.dialect)
            # index names: the transport's 55-byte table limit leaves room for these suffixes
            ids["expires_index"] = q(a.table + "_Expires", self.dialect)
            ids["due_index"] = q(a.table + "_Due", self.dialect)
            ids["catalog_prefix"] = ""
        else:
            ids["schema"] = q(a.schema or "dbo", self.dialect)
            ids["catalog_prefix"] = q(a.catalog, self.dialect) + "." if a.catalog else ""
        return ids

    def params(self) -> dict[str, Any]:
        """Values that identify the table as data (catalog queries, lock names): always bound."""
        return {
            "schema": self.address.schema,
            "table": self.address.table,
            "qualified_name": self.qualified,
            "lock_name": self.canonical + "_lock",
            "schema_lock_name": "queuelake schema " + (self.address.schema or ""),
        }

    def delayed(self) -> TableRef:
        """The endpoint's delayed-delivery table, ``<endpoint>.Delayed`` beside its queue."""
        a = self.address
        return resolve_address(QueueAddress(a.table + ".Delayed", a.schema, a.catalog), self.dialect)

    def __str__(self) -> str:
        return self.canonical


def resolve_address(address: QueueAddress, dialect: str) -> TableRef:
    if dialect == "postgresql":
        addr.checked_postgresql(address)
    else:
        addr._checked_sqlserver(address, address.table)
    return TableRef(address, dialect)


def queue_ref(text: str, transport: TransportConfig) -> TableRef:
    """Parse a configured or stored address (canonical or short) and apply the defaults."""
    parsed = addr.parse(text, transport.dialect)
    catalog = transport.default_catalog if transport.dialect == "sqlserver" else None
    return resolve_address(parsed.with_defaults(transport.default_schema, catalog), transport.dialect)


def bridge_ref(name: str, transport: TransportConfig) -> TableRef:
    """A bridge table named in config (subscription table, ledger): a bare table name or address."""
    return queue_ref(name, transport)
