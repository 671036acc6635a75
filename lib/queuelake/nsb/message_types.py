"""Message type names as NServiceBus writes them in ``NServiceBus.EnclosedMessageTypes``: assembly-
qualified .NET names joined by ``;``, the first the message's own type. One value at a time (the
reference, and the subscription Topic form publish looks subscribers up by) and a whole column in
Arrow (the journal's ``enclosed_message_types`` and ``message_type``).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc


def full_type_name(assembly_qualified: str) -> str:
    """``Ns.Type, Assembly, Version=...`` -> ``Ns.Type`` (the subscription Topic form).

    The assembly part starts at the first comma outside generic-argument brackets, so
    ``Ns.Wrapper`1[[Ns.Inner, Asm]], Asm`` -> ``Ns.Wrapper`1[[Ns.Inner, Asm]]`` (as ``Type.FullName``).
    A backslash escapes the next character, as in .NET type names.
    """
    depth = 0
    i = 0
    while i < len(assembly_qualified):
        ch = assembly_qualified[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            return assembly_qualified[:i].strip()
        i += 1
    return assembly_qualified.strip()


_ASSEMBLY_DETAIL = re.compile(r",\s*(Version|Culture|PublicKeyToken)\s*=\s*[^,\]]*")


def without_versions(full_name: str) -> str:
    """A full name without its generic arguments' assembly versions, cultures and key tokens
    (``Ns.Envelope`1[[Ns.Order, Asm, Version=2.0.0.0, ...]]`` -> ``Ns.Envelope`1[[Ns.Order, Asm]]``): the
    type across releases, as a plain type's full name already is. Why: a generic type's full name (the
    journal's ``message_type``, .NET's ``Type.FullName``) changes with each release of its arguments'
    assembly, which split one contract into a typed table per release."""
    return _ASSEMBLY_DETAIL.sub("", full_name) if "[" in full_name else full_name


def split_types(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [t.strip() for t in value.split(";") if t.strip()]


# characters Python's str.strip() removes but Arrow's utf8_trim_whitespace may not
_EXOTIC_SPACE = (
    r"[\t\n\x0b\x0c\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
)
_NEEDS_PYTHON = r"(^ | ;|; | $|;;|^;|;$|^$|\[|\\|" + _EXOTIC_SPACE + ")"
# a value that names no type once tidied (``split_types``: separators and whitespace alone), in the
# syntax both Arrow's RE2 and Spark's Java regex read alike: the contract check and its Arrow pre-check
# judge what publish will send (a tab or a no-break space passed them and went out as an empty type)
NO_TYPE = r"^(?:[;\s]|" + _EXOTIC_SPACE + r")*$"


def enclosed_types(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """EnclosedMessageTypes as a list, and the first type's full name. A queue carries a handful of
    message types, so the work is done once per distinct value and spread back to the rows: 1.2-1.7
    ms per 10,000 rows, against 6.6-8.4 when done per row (12-15 when odd values among them sent
    every row through the codec)."""
    encoded = pc.dictionary_encode(values)
    types, names = _split_enclosed_types(encoded.dictionary)
    return pc.take(types, encoded.indices), pc.take(names, encoded.indices)


def _split_enclosed_types(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The common shape (no stray spaces or empty parts, no generics) is split in Arrow; the rest
    value by value with the codec."""
    types = pc.split_pattern(values, ";")
    first = pc.list_element(types, 0)
    names = pc.utf8_trim_whitespace(pc.list_element(pc.split_pattern(first, ",", max_splits=1), 0))
    odd = pc.match_substring_regex(values, _NEEDS_PYTHON).to_pylist()
    if not any(odd):
        return types, names
    py_types = types.to_pylist()
    py_names = names.to_pylist()
    raw = values.to_pylist()
    for i, flag in enumerate(odd):
        if flag:
            py_types[i] = split_types(raw[i])
            py_names[i] = full_type_name(py_types[i][0]) if py_types[i] else None
    return pa.array(py_types, pa.list_(pa.string())), pa.array(py_names, pa.string())
