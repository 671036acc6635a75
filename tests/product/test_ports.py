"""``tests.ports``: the servers the tests start get ports the kernel never hands to outgoing connections."""

from __future__ import annotations

import socket

from tests.helpers import ports


def test_free_ports_are_bindable_and_below_the_ephemeral_range() -> None:
    start = ports._ephemeral_start()
    for _ in range(20):
        port = ports.free_port()
        assert 1024 <= port < start
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
