"""What redaction must make true of every message a user can see: no secret shown, no word cut by a mark."""

from __future__ import annotations

import re

# A "name" in a message: a run of word characters, joined by single dots or hyphens
# (postgresql, 127.0.0.1, typo_key.yaml, transport.dialect, s3cr3t-Pa55).
_NAMES = re.compile(r"\w+(?:[.-]\w+)*")
# what substring replacement does to the words around a secret: postgres in postgresql -> ***ql
# (an escape before the mark, a repr's \n, is not a word)
_CUT_WORD = re.compile(r"(?<!\\)\w\*\*\*|\*\*\*\w")


def shows_secret(text: str, secret: str) -> bool:
    """Whether ``text`` shows ``secret``: as one of its names (for a secret that is itself a name,
    such as "postgres" or "a": inside a longer name, as in "postgresql", it is not shown), else
    anywhere. Redaction must make this false for every message a user can see."""
    if _NAMES.fullmatch(secret):
        return secret in _NAMES.findall(text)
    return secret in text


def cut_words(text: str) -> list[str]:
    """The places where a redaction mark is glued to a word: the mark of a secret replaced inside
    a word it is only a part of."""
    return _CUT_WORD.findall(text)
