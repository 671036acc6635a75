"""Instants as text, the same for every year from 1 to 9999.

Why a module of its own: ``strftime``'s ``%Y`` gives ``1`` for year 1 on glibc, not ``0001``. As a SQL
literal that text does not parse (an ``erase --where`` on a ``DateTime.MinValue`` time failed, after its dry
run had counted the rows), and in a table it breaks the columns' alignment. ``isoformat`` always writes four
digits; everything here builds on it.
"""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc


def as_utc(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC; a naive time is taken as UTC (as the journal's are)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_utc(value: dt.datetime, timespec: str = "microseconds") -> str:
    """ISO 8601 and ``Z``: ``0001-01-01T00:00:00.000000Z`` (``timespec`` as ``isoformat``'s). For SQL
    literals a Delta engine reads as the same instant, and Delta statistics (in milliseconds)."""
    return as_utc(value).replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def shown_utc(value: dt.datetime, timespec: str = "milliseconds") -> str:
    """For people: ``0001-01-01 00:00:00.000`` (``timespec`` as ``isoformat``'s), in UTC, zone not written."""
    return as_utc(value).replace(tzinfo=None).isoformat(sep=" ", timespec=timespec)
