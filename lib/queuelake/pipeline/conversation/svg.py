"""A conversation drawn as a sequence diagram, in SVG text: endpoints as lanes, one message per row.

Why hand-written SVG and not matplotlib: matplotlib is the notebooks' extra, not the base install the
command runs with, and a sequence diagram is lanes, arrows and labels whose places are known exactly
(one row per message, one label per row), which SVG says in a few elements a browser, a notebook or
a pull request shows as they are.

How it stays readable from 3 messages to 300:
- time runs down the page as ordinal rows, one per message, in the order they were sent; the height
  grows with the messages and the row height does not change, so nothing is squeezed or overlaps;
  the left column gives each row its number, its time (UTC) and the row of the message that caused it;
- each label sits on its own row, above its arrow, on a white box, starting at the arrow's left end;
  labels are monospace, so their boxes are computed exactly (``CHAR_WIDTH``) and the width of the
  picture grows to hold the longest;
- lanes are spaced by their names' widths; past ``REPEAT_HEADERS_AFTER`` rows the lane names are
  repeated at the bottom;
- every text from a row is escaped for XML (characters XML cannot hold become U+FFFD).

Elements carry classes and ``data-`` attributes (``lane``/``data-endpoint``, ``message``/``data-status``,
``label-box``), so a test or a script can read what was drawn.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from queuelake.pipeline.conversation.model import Conversation, Message
from queuelake.timetext import shown_utc

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 11
# a monospace advance (DejaVu Sans Mono, Menlo, Consolas: 0.60 em) rounded up to whole pixels, as hinting
# renderers lay it out (cairo draws 11 px DejaVu Sans Mono at 7 px a character, browsers at 6.6)
CHAR_WIDTH = math.ceil(0.602 * FONT_SIZE)
HEADER_FONT_SIZE = 12
HEADER_CHAR_WIDTH = math.ceil(0.602 * HEADER_FONT_SIZE)
ROW_HEIGHT = 24
LABEL_HEIGHT = 14
MIN_LANE_GAP = 150
MAX_TYPE_CHARS = 48
MAX_EXCEPTION_CHARS = 40
REPEAT_HEADERS_AFTER = 20
MARGIN = 16
CAUSE_HEAD = "caused by"  # the row of the message whose handling sent this one (NServiceBus.RelatedTo)

COLOURS = {
    "processed": "#374151",
    "retried": "#b45309",
    "failed": "#c62828",
    "sent": "#6b7280",
    "expired": "#9ca3af",
}
DASHED = {"sent": "5 3", "expired": "2 3"}
LEGEND = [
    ("processed", "processed"),
    ("failed", "failed (exception type)"),
    ("retried", "failed, then processed on a retry"),
    ("sent", "drained from its queue, not processed"),
]
FAIL_MARK = "\u2717"  # ✗
RETRY_MARK = "\u21bb"  # ↻

_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def escape(text: object) -> str:
    """Text from a row, safe as XML character data and in a double-quoted attribute."""
    value = _NOT_XML.sub("\ufffd", str(text))
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def text_width(text: str, char_width: float = CHAR_WIDTH) -> float:
    return len(text) * char_width


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def duration_text(value: dt.timedelta | None) -> str | None:
    """A processing time in the unit that fits it: 850 ms, 1.25 s, 2.5 min, 1.2 h. One that ended before
    it started (ProcessingEnded and ProcessingStarted written by different clocks) says so, rather than
    ``0 ms`` or ``-2e+03 ms``."""
    if value is None:
        return None
    seconds = value.total_seconds()
    if seconds < 0:
        return "ended before it started"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def short_exception(name: str | None) -> str:
    if not name:
        return "exception"
    return clip(name.rsplit(".", 1)[-1], MAX_EXCEPTION_CHARS)


@dataclass
class Label:
    """One message's label: spans of (text, class), drawn one after the other on one line."""

    spans: list[tuple[str, str]]

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.spans)

    @property
    def width(self) -> float:
        return text_width(self.text)


def label_of(message: Message) -> Label:
    """``PlaceOrder · Send · 120 ms``, then ``✗ TimeoutException`` and ``↻ retried`` where they apply."""
    spans = [(clip(message.short_type, MAX_TYPE_CHARS), "type")]
    details = [message.intent or "?"]
    took = duration_text(message.processing_time)
    if took:
        details.append(took)
    if message.status == "sent":
        details.append("not processed")
    elif message.status == "expired":
        details.append("expired")
    spans.append((" \u00b7 " + " \u00b7 ".join(details), "details"))
    if message.failures:
        last = message.failures[-1]
        times = f" \u00d7{len(message.failures)}" if len(message.failures) > 1 else ""
        spans.append((f"  {FAIL_MARK} {short_exception(last.exception_type)}{times}", "failure"))
    if message.retried:
        spans.append((f"  {RETRY_MARK} retried", "retry"))
    return Label(spans)


def tooltip(message: Message) -> str:
    """The message in full, as a hover title: what the label shortens."""
    lines = [
        f"{message.short_type} ({message.intent or '?'}): {message.sender} -> {message.receiver}",
        f"MessageId {message.message_id}",
        f"type {message.message_type or '?'}",
        f"sent {_utc(message.time_sent)}",
    ]
    if message.processing_started or message.processing_ended:
        took = duration_text(message.processing_time) or "?"
        lines.append(f"processed {_utc(message.processing_started)} to {_utc(message.processing_ended)} ({took})")
    for attempt in message.failures:
        lines.append(f"failed {_utc(attempt.when)}: {attempt.exception_type or '?'}: {attempt.exception_message or ''}")
    lines.append(f"status {message.status}; {message.copies} journal row(s) from {', '.join(message.queues)}")
    return "\n".join(lines)


def _utc(value: dt.datetime | None) -> str:
    return "-" if value is None else shown_utc(value) + " UTC"


def _row_times(messages: list[Message]) -> list[str]:
    """Each row's time: HH:MM:SS.mmm when the conversation lies within one day, else with the date."""
    times = [m.when.astimezone(dt.timezone.utc) if m.when else None for m in messages]
    days = {t.date() for t in times if t is not None}
    start = 11 if len(days) <= 1 else 5  # shown_utc's text from the hour, or from the month
    return ["-" if t is None else shown_utc(t)[start:] for t in times]


@dataclass
class Layout:
    """Where things go, computed before anything is written (the test reads the same numbers back)."""

    lane_x: dict[str, float]
    lane_box: dict[str, float]  # the width of each lane's name box
    gutter: list[str]  # per row: its number, time and cause, as one monospace line
    gutter_head: str
    top: float  # y of the first row
    width: float
    height: float
    labels: list[tuple[float, Label]]  # per row: the label's x and its spans


def layout(conversation: Conversation) -> Layout:
    messages = conversation.messages
    numbers = [str(i + 1) for i in range(len(messages))]
    times = _row_times(messages)
    causes = ["" if m.caused_by is None else f"#{m.caused_by + 1}" for m in messages]
    n_w = max([len(n) for n in numbers] + [1])
    t_w = max([len(t) for t in times] + [len("sent (UTC)")])
    c_w = max([len(c) for c in causes] + [len(CAUSE_HEAD)])
    gutter = [f"{n:>{n_w}}  {t:<{t_w}}  {c:<{c_w}}" for n, t, c in zip(numbers, times, causes, strict=True)]
    gutter_head = f"{'#':>{n_w}}  {'sent (UTC)':<{t_w}}  {CAUSE_HEAD:<{c_w}}"
    gutter_right = MARGIN + text_width(gutter_head) + 14

    lane_box = {lane: text_width(lane, HEADER_CHAR_WIDTH) + 16 for lane in conversation.endpoints}
    lane_x: dict[str, float] = {}
    previous: str | None = None
    for lane in conversation.endpoints:
        if previous is None:
            lane_x[lane] = gutter_right + max(lane_box[lane] / 2, 40)
        else:
            gap = max(MIN_LANE_GAP, (lane_box[previous] + lane_box[lane]) / 2 + 24)
            lane_x[lane] = lane_x[previous] + gap
        previous = lane
    top = 112.0
    labels = []
    right = max((lane_x[lane] + lane_box[lane] / 2 for lane in lane_x), default=gutter_right)
    for message in messages:
        a, b = lane_x[message.sender], lane_x[message.receiver]
        x = a + 30 if a == b else min(a, b) + 10  # a loop's label right of it, else at the arrow's left end
        label = label_of(message)
        labels.append((x, label))
        right = max(right, x + label.width + 6)
    legend_right = MARGIN + sum(34 + text_width(text) + 18 for _, text in LEGEND)
    title_right = MARGIN + text_width(_title(conversation), math.ceil(0.602 * 14))
    width = max(right, legend_right, title_right, text_width(_subtitle(conversation)) + MARGIN) + MARGIN
    height = top + len(messages) * ROW_HEIGHT + 12
    if len(messages) > REPEAT_HEADERS_AFTER:
        height += 34
    return Layout(lane_x, lane_box, gutter, gutter_head, top, width, height + MARGIN, labels)


def _title(conversation: Conversation) -> str:
    return f"Conversation {conversation.conversation_id}"


def _subtitle(conversation: Conversation) -> str:
    n, k = len(conversation.messages), len(conversation.endpoints)
    parts = [f"{n} message{'s' * (n != 1)} between {k} endpoint{'s' * (k != 1)}"]
    parts.append(f"{conversation.failed} failed")
    parts.append(f"{conversation.retries} retried")
    times = [m.when for m in conversation.messages if m.when is not None]
    if times:
        parts.append(f"{_utc(min(times))} to {_utc(max(times))}")
    return " \u00b7 ".join(parts)


def render(conversation: Conversation) -> str:
    """The conversation as one SVG document (text)."""
    plan = layout(conversation)
    out: list[str] = []
    w, h = round(plan.width), round(plan.height)
    out.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'font-family="{FONT}" font-size="{FONT_SIZE}" data-conversation-id="{escape(conversation.conversation_id)}">'
    )
    out.append(f"<title>{escape(_title(conversation))}</title>")
    out.append(_defs())
    out.append(f'<rect width="{w}" height="{h}" fill="#ffffff"/>')
    out.append(
        f'<text class="title" x="{MARGIN}" y="26" font-size="14" font-weight="bold">'
        f"{escape(_title(conversation))}</text>"
    )
    out.append(f'<text class="subtitle" x="{MARGIN}" y="46" fill="#374151">{escape(_subtitle(conversation))}</text>')
    out.extend(_legend(MARGIN, 66))
    bottom = plan.top + len(conversation.messages) * ROW_HEIGHT
    for i in range(len(conversation.messages)):  # zebra rows: the eye follows a row from its number to its arrow
        if i % 2:
            y = plan.top + i * ROW_HEIGHT
            out.append(f'<rect x="{MARGIN / 2}" y="{y}" width="{w - MARGIN}" height="{ROW_HEIGHT}" fill="#f5f6f8"/>')
    out.append(
        f'<text class="gutter-head" x="{MARGIN}" y="{plan.top - 8}" fill="#6b7280" xml:space="preserve">'
        f"{escape(plan.gutter_head)}</text>"
    )
    out.extend(
        _lanes(
            plan, plan.top - 38, bottom + 4, bottom + 8 if len(conversation.messages) > REPEAT_HEADERS_AFTER else None
        )
    )
    for i, message in enumerate(conversation.messages):
        out.extend(_row(plan, i, message))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _defs() -> str:
    markers = "".join(
        f'<marker id="head-{status}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
        f'orient="auto-start-reverse" markerUnits="userSpaceOnUse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        for status, colour in COLOURS.items()
    )
    return f"<defs>{markers}</defs>"


def _legend(x: float, y: float) -> Iterable[str]:
    for status, text in LEGEND:
        dash = f' stroke-dasharray="{DASHED[status]}"' if status in DASHED else ""
        yield (
            f'<line class="legend" x1="{x}" y1="{y - 4}" x2="{x + 28}" y2="{y - 4}" stroke="{COLOURS[status]}" '
            f'stroke-width="1.6"{dash} marker-end="url(#head-{status})"/>'
        )
        yield f'<text class="legend" x="{x + 34}" y="{y}" fill="{COLOURS[status]}">{escape(text)}</text>'
        x += 34 + text_width(text) + 18


def _lanes(plan: Layout, header_y: float, line_end: float, footer_y: float | None) -> Iterable[str]:
    for lane, x in plan.lane_x.items():
        box = plan.lane_box[lane]
        yield f'<g class="lane" data-endpoint="{escape(lane)}">'
        yield (
            f'<line x1="{x:.1f}" y1="{header_y + 24}" x2="{x:.1f}" y2="{line_end}" stroke="#9ca3af" '
            f'stroke-width="1" stroke-dasharray="3 3"/>'
        )
        for y in (header_y, footer_y) if footer_y is not None else (header_y,):
            yield (
                f'<rect class="lane-box" x="{x - box / 2:.1f}" y="{y}" width="{box:.1f}" height="24" rx="4" '
                f'fill="#e8eef7" stroke="#4b6584"/>'
            )
            yield (
                f'<text class="lane-name" x="{x:.1f}" y="{y + 16}" text-anchor="middle" font-size="{HEADER_FONT_SIZE}" '
                f'font-weight="bold" fill="#1f2937" xml:space="preserve">{escape(lane)}</text>'
            )
        yield "</g>"


def _row(plan: Layout, i: int, message: Message) -> Iterable[str]:
    band = plan.top + i * ROW_HEIGHT
    status = message.status
    colour = COLOURS[status]
    a, b = plan.lane_x[message.sender], plan.lane_x[message.receiver]
    y = band + 18
    classes = " ".join(["message", status] + (["has-failure"] if message.failures else []))
    attributes = [
        f'class="{classes}"',
        f'data-row="{i + 1}"',
        f'data-status="{status}"',
        f'data-message-id="{escape(message.message_id)}"',
        f'data-from="{escape(message.sender)}"',
        f'data-to="{escape(message.receiver)}"',
        f'data-failures="{len(message.failures)}"',
        f'data-retried="{str(message.retried).lower()}"',
    ]
    if message.caused_by is not None:
        attributes.append(f'data-caused-by="{message.caused_by + 1}"')
    yield f"<g {' '.join(attributes)}>"
    yield f"<title>{escape(tooltip(message))}</title>"
    yield (
        f'<text class="gutter" x="{MARGIN}" y="{band + 16}" fill="#4b5563" xml:space="preserve">'
        f"{escape(plan.gutter[i])}</text>"
    )
    dash = f' stroke-dasharray="{DASHED[status]}"' if status in DASHED else ""
    stroke = f'stroke="{colour}" stroke-width="1.6" fill="none"{dash} marker-end="url(#head-{status})"'
    if a == b:  # sent to itself: a loop to the right of its lane
        yield f'<path class="arrow" d="M{a:.1f},{y - 5} h22 v9 h-20" {stroke}/>'
    else:
        end = b - 1 if b > a else b + 1
        yield f'<line class="arrow" x1="{a:.1f}" y1="{y}" x2="{end:.1f}" y2="{y}" {stroke}/>'
    if status == "failed" and a != b:  # a cross just past the receiver's lane, where it failed
        cx = b + (7 if b > a else -7)
        yield (
            f'<path class="failure-mark" d="M{cx - 3.5:.1f},{y - 2.5} l7,7 m0,-7 l-7,7" stroke="{colour}" '
            f'stroke-width="2"/>'
        )
    x, label = plan.labels[i]
    yield (
        f'<rect class="label-box" x="{x - 3:.1f}" y="{band + 2}" width="{label.width + 6:.1f}" '
        f'height="{LABEL_HEIGHT}" fill="#ffffff" fill-opacity="0.9" rx="2"/>'
    )
    spans = "".join(_span(text, kind) for text, kind in label.spans)
    yield f'<text class="label" x="{x:.1f}" y="{band + 13}" xml:space="preserve">{spans}</text>'
    yield "</g>"


def _span(text: str, kind: str) -> str:
    style = {
        "type": 'font-weight="bold" fill="#111827"',
        "details": 'fill="#374151"',
        "failure": f'font-weight="bold" fill="{COLOURS["failed"]}"',
        "retry": f'font-weight="bold" fill="{COLOURS["retried"]}"',
    }[kind]
    return f'<tspan class="{kind}" {style}>{escape(text)}</tspan>'
