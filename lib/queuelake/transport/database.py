"""The queue database a command works on, as one handle: its resolved transport settings, how to open
a connection, and the tables queuelake keeps there (bridge tables) or reaches (queues).

Why a handle: before it, every stage took the whole ``Config`` down to the module that finally
connected, and each of those modules connected on its own (``context.connect(config)``), resolving
the embedded server's address again and re-deriving the bridge tables' names from
``config.transport``. The command layer now opens the database once (``context.open_database``) and
passes this down: a module that needs a connection takes the handle, nothing else of the config.

Opening is lazy: with an embedded server configured (``transport.embedded``), the server is started
the first time a connection is needed (``connect``, ``shared_adbc``), not when the command opens the
handle, so a command that finds nothing to do for the database (an idle publish: no outbound table
with anything to send) never starts a PostgreSQL server.

The handle is frozen and picklable: it travels to Spark tasks and to the drain's local processes,
which connect with it as the driver does, never starting an embedded server of their own: pickling
fills the connection string in first (starting the server in the process that ships it). Its
``repr`` names the dialect and driver only: the connection string is a secret (errors stay redacted
by ``db.connect``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from queuelake.config_sections import TransportConfig
from queuelake.transport import db, embedded
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef, bridge_ref, queue_ref


@dataclass(frozen=True)
class QueueDatabase:
    """One queue database: ``transport`` as configured; an embedded server's connection string is
    filled in (the server started) on the first connection."""

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
        """Whether a connection string is set or an embedded server will give one (a config read for
        planning only may have neither); asking starts no server."""
        return bool(self.transport.connection or self.transport.embedded)

    @functools.cached_property
    def _connectable(self) -> TransportConfig:
        """``transport`` with the connection string filled in: an embedded server is started here, once
        per handle (and once per process and data folder, ``embedded.embedded_server``)."""
        return embedded.resolved_transport(self.transport)

    def connect(self, application_name: str = "queuelake", driver: str | None = None) -> Connection:
        """A new connection in manual-commit mode; errors name the driver, never the connection string."""
        return db.connect(self._connectable, application_name, driver)

    def shared_adbc(self) -> db.SharedAdbc:
        """ADBC connections sharing one ADBC database (``db.SharedAdbc``), opening in the background."""
        return db.SharedAdbc(self._connectable).start()

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

    def __getstate__(self) -> dict[str, object]:
        """What pickles: the connection string filled in first, so that a Spark task or a drain process
        connects to the server this process started instead of starting one of its own."""
        self._connectable  # noqa: B018  # computed (and cached in __dict__) before the copy is taken
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"QueueDatabase({self.dialect}, {self.driver})"
