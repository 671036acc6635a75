"""One conversation drawn in a notebook: the picture ``queuelake conversation`` writes, shown under the cell.

Why here as well as in the command: the notebooks find the conversation worth looking at (the latest
failure, a slow message) and should show it where they found it, without a shell. The drawing is the
command's (``pipeline/conversation``), so both show the same picture.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuelake.lake.record_tables import MESSAGES
from queuelake.pipeline.conversation.model import COLUMNS, Conversation, build
from queuelake.pipeline.conversation.svg import render

if TYPE_CHECKING:
    from queuelake.lake.port import LakeEngine


@dataclass(frozen=True)
class ConversationPicture:
    """The drawing (``svg``: the SVG text) and what it shows (``conversation``). As a cell's last value
    it shows as the picture in Jupyter and on Databricks (``_repr_svg_``, ``_repr_html_``)."""

    svg: str
    conversation: Conversation

    def _repr_svg_(self) -> str:
        return self.svg

    def _repr_html_(self) -> str:
        return f'<div style="overflow:auto;max-height:80vh">{self.svg}</div>'

    def save(self, path: str) -> str:
        """Write the SVG to ``path`` (its folder created); returns the absolute path."""
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(self.svg)
        return os.path.abspath(path)


def draw(lake: LakeEngine, conversation_id: str) -> ConversationPicture | None:
    """The conversation's picture from the lake's journal, or None with a note when no journal row has
    that conversation id (a note, not an empty picture, as the notebooks do elsewhere)."""
    if not lake.exists(MESSAGES.name):
        print(f"note: no lake table {MESSAGES.name!r} under {lake.root}: no conversation to draw")
        return None
    rows = lake.lookup(MESSAGES.name, "conversation_id", [conversation_id]).rows.select(COLUMNS).to_pylist()
    conversation = build(conversation_id, rows)
    if not conversation.messages:
        print(f"note: no journal row has conversation_id {conversation_id!r}: nothing to draw")
        return None
    return ConversationPicture(render(conversation), conversation)
