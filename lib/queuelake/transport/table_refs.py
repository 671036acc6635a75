"""Resolved references to the tables queuelake touches: queues, delayed stores, bridge tables.

A ``TableRef`` carries an address with the configured defaults applied and knows how to present it
to the SQL files: quoted identifiers for ``{placeholders}``, plain strings only as bound parameters.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from queuelake.config_sections import TransportConfig
from queuelake.dialects.address import QueueAddress
from queuelake.dialects.dialect import Dialect
from queuelake.dialects.dialect import dialect as named_dialect
from queuelake.errors import QueuelakeError


@dataclass(frozen=True)
class TableRef:
    address: QueueAddress
    dialect: str

    @property
    def rules(self) -> Dialect:
        """The dialect object: quoting, defaults, capabilities."""
        return named_dialect(self.dialect)

    @functools.cached_property
    def canonical(self) -> str:
        """The canonical queue address, as the journal's ``queue`` column records it."""
        return self.rules.format(self.address)

    @functools.cached_property
    def qualified(self) -> str:
        return self.rules.qualified(self.address)

    @property
    def table(self) -> str:
        return self.address.table

    def identifiers(self) -> dict[str, str]:
        return self.rules.table_identifiers(self.address)

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
    named_dialect(dialect).check(address)
    return TableRef(address, dialect)


def queue_ref(text: str, transport: TransportConfig) -> TableRef:
    """Parse a configured or stored address (canonical or short) and apply the defaults."""
    rules = named_dialect(transport.dialect)
    address = rules.resolve(text, transport.default_schema, transport.default_catalog)
    return TableRef(address, transport.dialect)


def endpoint_queue_address(endpoint: str, transport: TransportConfig) -> str:
    """The address of the queue an endpoint named ``endpoint`` receives from by default: the table of
    that very name in the default schema. A dotted name (``Sales.Orders``) is one table, where an
    address would split it (PostgreSQL: schema ``Sales``, table ``Orders``: a review). A name no
    address can hold is given back as it is, for the resolution to refuse with its reason."""
    rules, table = named_dialect(transport.dialect), QueueAddress(endpoint)
    try:
        return endpoint if rules.resolve(endpoint, None, None) == table else rules.format(table)
    except QueuelakeError:
        return endpoint


def bridge_ref(name: str, transport: TransportConfig) -> TableRef:
    """A bridge table named in config (subscription table, ledger): a bare table name or address."""
    return queue_ref(name, transport)
