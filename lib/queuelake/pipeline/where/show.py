"""The places as an operator reads them: a table of one line per place, or one JSON object per place
(``--json``), as ``queuelake find`` shows rows (``pipeline/find/show.py``); and the command's JSON
summary of an answer (``summary``)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from queuelake.pipeline.where.places import Place, state_of
from queuelake.report import printable
from queuelake.timetext import iso_utc, shown_utc

if TYPE_CHECKING:
    from queuelake.pipeline.where.run import Answer

TABLE = ("message_id", "place", "at", "location", "endpoint", "detail")
HEADINGS = {"message_id": "MESSAGE ID", "at": "AT (UTC)"}
DETAIL_CHARS = 90


def jsonable(value: Any) -> Any:
    """Times as ISO 8601 UTC text, through dicts and lists."""
    if isinstance(value, dt.datetime):
        return iso_utc(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def place_dict(place: Place) -> dict[str, Any]:
    return jsonable(
        {
            "message_id": place.message_id,
            "place": place.place,
            "location": place.location,
            "at": place.at,
            "endpoint": place.endpoint,
            "detail": place.detail,
            "time_sent": place.time_sent,
            "source": place.source,
            **place.facts,
        }
    )


def json_lines(places: list[Place]) -> Iterator[str]:
    for place in places:
        yield orjson.dumps(place_dict(place), default=str).decode()


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cells(place: Place) -> dict[str, str]:
    return {
        "message_id": place.message_id or "-",
        "place": place.place,
        "at": shown_utc(place.at) if isinstance(place.at, dt.datetime) else "-",
        "location": place.location or "-",
        "endpoint": place.endpoint or "-",
        "detail": _short(place.detail or "-", DETAIL_CHARS),
    }


def table_lines(places: list[Place]) -> list[str]:
    """The places as aligned text lines under a heading; ``(found nowhere)`` for none."""
    if not places:
        return ["(found nowhere)"]
    cells = [{name: printable(text) for name, text in _cells(p).items()} for p in places]
    heads = {name: HEADINGS.get(name, name.upper()) for name in TABLE}
    widths = {name: max(len(heads[name]), *(len(c[name]) for c in cells)) for name in TABLE}

    def line(values: dict[str, str]) -> str:
        return "  ".join(values[n].ljust(widths[n]) for n in TABLE).rstrip()

    return [line(heads)] + [line(c) for c in cells]


def summary(answer: Answer) -> dict[str, Any]:
    """The JSON summary's fields (times as ISO text)."""
    messages = answer.messages()
    now = {mid: state_of(places) for mid, places in messages.items()}
    return {
        "searched": list(answer.searched),
        "found": len(answer.places),
        "places": dict(Counter(p.place for p in answer.places)),
        "messages": [
            {
                "message_id": mid,
                "now": state.place,
                "location": state.location,
                "at": jsonable(state.at),
                "places": [p.place for p in places],
            }
            for (mid, places), state in zip(messages.items(), now.values(), strict=True)
        ][:100],
        "journal": jsonable(answer.journal),
        "typed": jsonable(answer.typed),
        "queues": answer.queues,
        "replays": jsonable(answer.replays),
        "erase_runs": answer.erase_runs,
        "not_searched": answer.not_searched,
        "notes": answer.notes,
        "timings": answer.seconds,  # seconds of each part (the CLI adds the command's own "seconds")
    }
