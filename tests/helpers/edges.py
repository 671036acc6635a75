"""Values at the edges of their types, as a queue row and its headers can hold them: Expires as PostgreSQL
text and what the journal keeps of it, and header times at .NET's DateTime.MinValue/MaxValue and just past."""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc
TOP = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
BOTTOM = dt.datetime(1, 1, 1, tzinfo=UTC)
ORDINARY_TIME = "2026-11-02 08:30:00:123456 Z"

# Expires as PostgreSQL text, and what the journal holds: (expires, raw_expires). None: as written.
EXPIRES: dict[str | None, tuple[dt.datetime | None, str | None] | None] = {
    None: (None, None),
    "infinity": (TOP, "infinity"),
    "-infinity": (BOTTOM, "-infinity"),
    "20000-01-01 00:00:00": (TOP, "20000-01-01T00:00:00.000000"),
    "294276-12-31 23:59:59.999999": (TOP, "294276-12-31T23:59:59.999999"),
    "0044-03-15 12:30:00.5 BC": (BOTTOM, "0044-03-15T12:30:00.500000 BC"),
    "4713-01-01 00:00:00 BC": (BOTTOM, "4713-01-01T00:00:00.000000 BC"),
    "9999-12-31 23:59:59.999999": (TOP, None),
    "9999-12-31 23:59:59.9995": None,
    "0001-01-01 00:00:00": (BOTTOM, None),
    "0001-01-01 00:00:00.000001": None,
    "1999-12-31 23:59:59.999": None,
    "2999-06-01 00:00:00": None,
}
WIRE_TIMES = [
    "9999-12-31 23:59:59:999999 Z",  # DateTime.MaxValue
    "0001-01-01 00:00:00:000000 Z",  # DateTime.MinValue
    "9999-12-31 23:59:59:999500 Z",
    "0001-01-01 00:00:00:000001 Z",
    "10000-01-01 00:00:00:000000 Z",
    "0000-12-31 23:59:59:999999 Z",
    "9999-12-31 23:59:60:000000 Z",
    "2024-02-29 23:59:59:999999 Z",
    "",
    ORDINARY_TIME,
]
