"""``endpoint_daily`` as the table ``queuelake health`` prints: one line per day and endpoint."""

from __future__ import annotations

import pyarrow as pa

_HEADER = ("day", "endpoint", "processed", "failed", "retries", "types", "peak hour (UTC)", "peak", "critical p95")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def daily_lines(daily: pa.Table) -> list[str]:
    """The rows as aligned text (a header, then one line each); a line saying so when there are none."""
    if not daily.num_rows:
        return ["(no audit or error copies counted yet)"]
    rows = [_HEADER] + [
        (
            r["day"].isoformat(),
            r["endpoint"],
            str(r["processed"]),
            str(r["failed"]),
            str(r["retries"]),
            str(r["message_types"]),
            "-" if r["peak_hour"] is None else r["peak_hour"].strftime("%H:00"),
            str(r["peak_hour_processed"]),
            _ms(r["critical_p95_ms"]),
        )
        for r in daily.to_pylist()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    numeric = {2, 3, 4, 5, 7, 8}
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
