"""Wire times: the 28-character form NServiceBus writes its times in (``2024-05-01 13:45:10:123456 Z``),
and the span of instants every column that carries a time can hold.

Why a module of its own: the header codec reads these times, publish and the examples write them,
the commands parse one from the command line, and the outbound contract checks a row's times against
the span; none of them needs the rest of the codec for it.
"""

from __future__ import annotations

import datetime as dt
import re

from queuelake.errors import HeaderError

TIME_FORMAT = "%Y-%m-%d %H:%M:%S:%f Z"
# The span every column that carries a time holds (.NET's DateTime, SQL Server's datetime up to its
# last tick, Python's datetime, Spark's timestamp): a time outside it cannot be sent faithfully.
FIRST_INSTANT = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)
LAST_INSTANT = dt.datetime(9999, 12, 31, 23, 59, 59, 997000, tzinfo=dt.timezone.utc)
# Exactly the .NET "yyyy-MM-dd HH:mm:ss:ffffff Z" (ASCII digits, fixed widths), as ParseExact reads it.
_TIME_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}):([0-9]{6}) Z")


def parse_time(value: str, header: str = "time") -> dt.datetime:
    """Parse ``2024-05-01 13:45:10:123456 Z`` (colon before the microseconds) as aware UTC."""
    match = _TIME_RE.fullmatch(value) if isinstance(value, str) else None
    try:
        if match is None:
            raise ValueError
        year, month, day, hour, minute, second, micro = (int(g) for g in match.groups())
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.timezone.utc)
    except ValueError:
        raise HeaderError(
            f"header {header}: {value!r} is not a time in the form 'yyyy-MM-dd HH:mm:ss:ffffff Z'"
        ) from None


def format_time(value: dt.datetime) -> str:
    """The 28-character wire form NServiceBus writes and reads."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("format_time needs a timezone-aware datetime")
    try:
        v = value.astimezone(dt.timezone.utc)
    except OverflowError:
        raise ValueError(f"format_time: {value!r} is outside the range of UTC datetimes") from None
    # Not strftime: %Y is not zero-padded to four digits for years before 1000 on every platform.
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}:{v.microsecond:06d} Z"
