"""``status``'s age of a queue's oldest message, from its TimeSent header (no database)."""

from __future__ import annotations

import datetime as dt

from queuelake.commands.status import _oldest_age
from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


def test_the_age_of_the_oldest_message() -> None:
    assert _oldest_age(hdr.encode({hdr.TIME_SENT: format_time(NOW - dt.timedelta(minutes=5))}), NOW) == 300.0
    assert _oldest_age(None, NOW) is None and _oldest_age("{}", NOW) is None
    assert _oldest_age(hdr.encode({hdr.TIME_SENT: "yesterday"}), NOW) is None


def test_a_time_sent_ahead_of_this_clock_is_age_zero_not_negative() -> None:
    """A sender whose clock ran an hour fast made status say -3600 s (a review)."""
    assert _oldest_age(hdr.encode({hdr.TIME_SENT: format_time(NOW + dt.timedelta(hours=1))}), NOW) == 0.0
