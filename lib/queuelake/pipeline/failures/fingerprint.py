"""A stack trace's fingerprint: a stable hash of its frames with what changes between builds and
between messages stripped, so that one failure thrown by two builds (other line numbers, another
build folder) groups together, and two different call paths do not.

The normalisation, in order (``docs/failures.md`` says the same):
1. only the frame lines count: lines that start, after white space, with ``at `` (.NET's and Java's
   frames). The other lines hold the exception's type and message (``System.Exception: order 4711
   ...``, ``---> Inner: ...``), whose text varies per message; the exception type is a grouping key
   of its own;
2. in each frame, the source location is dropped: `` in <path>:line <n>`` (.NET), ``(<File>.java:<n>)``
   and any remaining ``:line <n>``;
3. GUIDs become ``<guid>`` and hexadecimal numbers (``0x7ffe12ab``, IL offsets ``+0x1a``) ``<hex>``;
4. compiler-generated names lose their build-dependent numbers: ``<Handle>d__12`` -> ``<Handle>d__N``,
   ``<>c__DisplayClass5_0`` -> ``<>c__DisplayClassN``, ``<Main>b__3_1`` -> ``<Main>b__N``, ``lambda$run$0``
   -> ``lambda$run$N``;
5. runs of white space become one space, each line trimmed.
The fingerprint is the first 16 hex digits of the SHA-256 of the normalised frames joined by newlines.
A stack trace with no frame (none, or text without ``at`` lines) has the fingerprint of no frames,
``NO_FRAMES``: such failures group by their other keys alone.
"""

from __future__ import annotations

import functools
import hashlib
import re

_FRAME = re.compile(r"^\s*at\s+(.*)$")
_DOTNET_LOCATION = re.compile(r"\s+in\s+.*?:line\s+\d+\s*$")
_LINE = re.compile(r":line\s+\d+")
_JAVA_LOCATION = re.compile(r"\(([^()]*?\.(?:java|kt|scala)):\d+\)")
_GUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_STATE_MACHINE = re.compile(r"(>d__)\d+")
_DISPLAY_CLASS = re.compile(r"(DisplayClass)\d+(?:_\d+)?")
_LAMBDA = re.compile(r"(>b__)\d+(?:_\d+)?")
_JAVA_LAMBDA = re.compile(r"(lambda\$[A-Za-z0-9_]+\$)\d+")
_SPACES = re.compile(r"\s+")


@functools.lru_cache(maxsize=65_536)
def _frame(text: str) -> str:
    """One frame normalised (steps 2-5). Cached: a journal's failures repeat the same frames (one call
    path failing for many messages), and ten regexps per frame were most of ``failures``' time."""
    text = _DOTNET_LOCATION.sub("", text)
    text = _LINE.sub("", text)
    text = _JAVA_LOCATION.sub(r"(\1)", text)
    text = _GUID.sub("<guid>", text)
    text = _HEX.sub("<hex>", text)
    text = _STATE_MACHINE.sub(r"\1N", text)
    text = _DISPLAY_CLASS.sub(r"\1N", text)
    text = _LAMBDA.sub(r"\1N", text)
    text = _JAVA_LAMBDA.sub(r"\1N", text)
    return _SPACES.sub(" ", text).strip()


def frames(stack_trace: str | None) -> list[str]:
    """The stack trace's frames, normalised (the module's steps 1-5)."""
    if not stack_trace:
        return []
    out = []
    for line in stack_trace.splitlines():
        match = _FRAME.match(line)
        if match:
            out.append(_frame(match.group(1)))
    return out


def fingerprint(stack_trace: str | None) -> str:
    """16 hex digits naming the normalised frames (``NO_FRAMES`` when there are none)."""
    return hashlib.sha256("\n".join(frames(stack_trace)).encode("utf-8")).hexdigest()[:16]


def fingerprints(stack_traces: list[str | None]) -> list[str]:
    """``fingerprint`` of each, each distinct text hashed once (a failure thrown for many messages
    carries one stack trace)."""
    known: dict[str | None, str] = {}
    return [known[s] if s in known else known.setdefault(s, fingerprint(s)) for s in stack_traces]


NO_FRAMES = fingerprint(None)
