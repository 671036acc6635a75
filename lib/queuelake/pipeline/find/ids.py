"""What an id given to ``queuelake find`` may be, and the spellings of it to look for.

Standard library only: the command checks its arguments with it while argparse parses them, before
anything heavy is imported (``commands/command.py``).
"""

from __future__ import annotations

import re
import uuid

from queuelake.errors import ArgumentError

MAX_ID_CHARS = 200  # NServiceBus ids are GUIDs; a header value that long is not an id anyone pastes
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")


def check_id(text: str) -> str:
    """An id as asked, or ArgumentError saying what is wrong with it: empty, surrounded by spaces,
    holding control characters, or longer than ``MAX_ID_CHARS``."""
    if not text:
        raise ArgumentError("the id is empty")
    if text != text.strip():
        raise ArgumentError(f"the id {text!r} begins or ends with white space")
    if len(text) > MAX_ID_CHARS:
        raise ArgumentError(f"the id is {len(text)} characters long; ids are at most {MAX_ID_CHARS}")
    if not _PRINTABLE.match(text):
        raise ArgumentError(f"the id {text!r} holds control characters")
    return text


def spellings(text: str) -> tuple[str, ...]:
    """What to look for: the id as given and, when it is a GUID in another spelling (upper case, in
    braces, without hyphens, as SQL Server shows a uniqueidentifier), its canonical lower-case form,
    the one NServiceBus writes in its headers."""
    try:
        canonical = str(uuid.UUID(text))
    except ValueError:
        return (text,)
    return (text,) if canonical == text else (text, canonical)
