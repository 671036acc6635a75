"""The failure groups and one group's messages as the text ``queuelake failures`` prints, or JSON lines."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import orjson

from queuelake.pipeline.conversation.model import endpoint_name
from queuelake.pipeline.failures.groups import Group, RowKey
from queuelake.report import printable

_HEADER = (
    "group",
    "copies",
    "msgs",
    "open",
    "retried",
    "first seen (UTC)",
    "last seen (UTC)",
    "endpoint",
    "message type",
    "exception",
    "stack",
)
_ROW_HEADER = ("message id", "journal row", "failed at (UTC)", "retry?", "exception message")


def _time(value: object) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else "-"


def _short_type(name: str | None) -> str:
    """A message type without its assembly part (``Ns.Type, Assembly, Version=...`` -> ``Ns.Type``)."""
    return "-" if name is None else name.split(",", 1)[0]


def _endpoint(g: Group) -> str:
    """The group's ProcessingEndpoint; without one (a copy failed before its handler ran, or an older
    NServiceBus), the endpoint its FailedQ names, in parentheses: it showed "-"."""
    if g.endpoint:
        return g.endpoint
    named = sorted({endpoint_name(r.failed_queue) or "" for r in g.rows} - {""})
    return f"({', '.join(named)})" if named else "-"


def _align(rows: Sequence[tuple[str, ...]], numeric: set[int]) -> list[str]:
    rows = [tuple(printable(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.rjust(widths[i]) if i in numeric else c.ljust(widths[i]) for i, c in enumerate(row)).rstrip()
        for row in rows
    ]


def group_lines(groups: list[Group]) -> list[str]:
    if not groups:
        return ["(no failed messages in the journal)"]
    rows = [_HEADER] + [
        (
            g.id,
            str(len(g.rows)),
            str(len(g.latest_rows())),
            str(len(g.replay_rows())),
            str(len(g.retried)),
            _time(g.first_seen),
            _time(g.last_seen),
            _endpoint(g),
            _short_type(g.message_type),
            g.exception_type or "-",
            g.fingerprint[:8],
        )
        for g in groups
    ]
    return _align(rows, {1, 2, 3, 4})


def _retry(g: Group, key: RowKey) -> str:
    """What became of a failure's retry: processed (resolved: replay leaves it), failed again, or none."""
    if key in g.retried_processed:
        return "processed"
    if key in g.retried_failed_again:
        return "failed again"
    return "retried" if key in g.retried else ""


def _fate(g: Group, key: RowKey) -> str:
    """``_retry``, and for a message whose latest failure is in another group, that group (its replay
    sends the message, or nobody does when a retry processed it since)."""
    later = g.elsewhere.get(key)
    if later is None:
        return _retry(g, key)
    where = f"latest failure in {later.group}" + (" (processed)" if later.resolved else "")
    return "; ".join(part for part in (_retry(g, key), where) if part)


def message_lines(g: Group) -> list[str]:
    rows = [_ROW_HEADER] + [
        (
            r.message_id or "-",
            f"{r.queue}@{r.seq}",
            _time(r.at),
            _fate(g, r.key),
            (r.exception_message or "").replace("\n", " ")[:80],
        )
        for r in g.latest_rows()
    ]
    return _align(rows, set())


def group_json(groups: list[Group]) -> Iterator[str]:
    for g in groups:
        # compact, as every other output is (these were spaced: a review)
        yield orjson.dumps(g.summary(), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def message_json(g: Group) -> Iterator[str]:
    sent = {r.key for r in g.replay_rows()}
    for r in g.latest_rows():
        later = g.elsewhere.get(r.key)
        yield orjson.dumps(
            {
                "group": g.id,
                "message_id": r.message_id,
                "queue": r.queue,
                "seq": r.seq,
                "failed_at": r.at.isoformat(),
                "failed_queue": r.failed_queue,
                "exception_message": r.exception_message,
                "retried": r.key in g.retried,
                "retry_outcome": _retry(g, r.key) or None,
                # the message's latest failure (this row, or one in another group) was processed since
                "resolved": later.resolved if later else r.key in g.retried_processed,
                "latest_failure_group": later.group if later else g.id,
                "latest_failure_row": f"{later.row[0]}@{later.row[1]}" if later else f"{r.queue}@{r.seq}",
                "in_replay": r.key in sent,  # the group's replay_where selects it
            },
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        ).decode()
