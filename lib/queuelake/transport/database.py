"""The queue database a command works on, as one handle: its resolved transport settings, how to open
a connection, and the tables queuelake keeps there (bridge tables) or reaches (queues).

Why a handle: before it, every stage took the whole ``Config`` down to the module that finally
connected, and each of those modules connected on its own (``context.connect(config)``), resolving
the embedded server's address again and re-deriving the bridge tables' names from
``config.transport``. The command layer now opens the database once (``context.open_database``) and
passes this down: a module that needs a connection takes the handle, nothing else of the config.

The handle is frozen and picklable: it travels to Spark tasks and to the drain's local processes,
which connect with it as the driver does, never starting an embedded server of their own (the
connection string is already resolved). Its ``repr`` names the dialect and driver only: the
connection string is a secret (errors stay redacted by ``db.connect``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from queuelake.config_sections import TransportConfig
from queuelake.transport import db
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef, bridge_ref, queue_ref


@dataclass(frozen=True)
class QueueDatabase:
    """One queue database: ``transport`` with an embedded server's connection already filled in."""

    transport: TransportConfig = field(repr=False)

    @property
    def dialect(self) -> str:
        return self.transport.dialect

    @property
    def driver(self) -> str:
        """The configured driver (a drain may receive with another: ``connect(driver=...)``)."""
        return self.transport.driver

    @property
    def reachable(self) -> bool:
        """Whether a connection string is set (a config read for planning only may have none)."""
        return bool(self.transport.connection)

    def connect(self, application_name: str = "queuelake", driver: str | None = None) -> Connection:
        """A new connection in manual-commit mode; errors name the driver, never the connection string."""
        return db.connect(self.transport, application_name, driver)

    def shared_adbc(self) -> db.SharedAdbc:
        """ADBC connections sharing one ADBC database (``db.SharedAdbc``), opening in the background."""
        return db.SharedAdbc(self.transport).start()

    def queue(self, address: str) -> TableRef:
        """A configured or stored queue address (canonical or short) with the defaults applied."""
        return queue_ref(address, self.transport)

    @functools.cached_property
    def ledger(self) -> TableRef:
        """The publish ledger (publish's and replay's batches sent)."""
        return bridge_ref(self.transport.ledger_table, self.transport)

    @functools.cached_property
    def claims(self) -> TableRef:
        """The drain's durable claims, one row per batch between its DELETE and its Delta commit."""
        return bridge_ref(self.transport.claims_table, self.transport)

    @functools.cached_property
    def subscriptions(self) -> TableRef:
        """The subscription routing table publish looks subscribers up in."""
        return bridge_ref(self.transport.subscription_table, self.transport)

    def __repr__(self) -> str:
        return f"QueueDatabase({self.dialect}, {self.driver})"
