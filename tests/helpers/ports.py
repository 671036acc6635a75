"""Ports for the servers the tests start (moto's S3, the standalone cluster's master and workers).

Why not ``bind(0)`` and close: the kernel takes that port from its ephemeral range and, once released, may
hand it to any outgoing connection (this suite opens PostgreSQL connections all the time, in two workers)
before the server binds it; the server then fails to start, or Spark's master moves to the next port and
the test talks to the wrong one. A port below the ephemeral range is only ever taken by a bind that names
it, so only the two workers' own servers could meet there, one chance in thousands per server.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and outside the ephemeral range."""
    high = _ephemeral_start()
    low = max(1024, high - 20000)
    for _ in range(200):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {low} and {high}")
