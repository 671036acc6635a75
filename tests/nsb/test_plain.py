"""The plain-form header decoder: it takes a row only if that row is JSON that decodes to exactly
the map it gives, and it takes the rows NServiceBus writes."""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.commands.demo import traffic
from queuelake.nsb import compact_headers as plain

# text NServiceBus writes without escapes: anything but a quote, a backslash or a control character
plain_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters='"\\', min_codepoint=0x20))
plain_maps = st.dictionaries(plain_text, plain_text, max_size=6)


def decode(rows: list[str]) -> plain.PlainMaps:
    return plain.decode(pa.array(rows, pa.string()), np.ones(len(rows), dtype=bool))


@pytest.mark.parametrize("positions_limit", [plain._POSITIONS_LIMIT, 0])  # 0: a scan per column
def test_nservicebus_headers_are_taken_with_every_entry_in_order(monkeypatch, positions_limit: int) -> None:
    monkeypatch.setattr(plain, "_POSITIONS_LIMIT", positions_limit)
    rows = [m.headers for m in traffic.order_events(200, seed=3)] + ["{}", '{"only":"this"}']
    found = decode(rows)
    assert found.taken.all()
    for raw, entries in zip(rows, found.maps.to_pylist()):
        assert entries == list(orjson.loads(raw).items())
    for key in (*found.columns, "only"):
        assert found.columns[key].to_pylist() == [orjson.loads(raw).get(key) for raw in rows], key
    assert "NServiceBus.TimeToBeReceived" not in found.columns


def test_a_slice_is_read_at_its_own_offset() -> None:
    """Texts that are a slice of a larger array (a bisected batch) start inside its buffers."""
    rows = ['{"a":"1"}', '{"b":"2","c":"3"}', '{"d":"4"}', '{"e": "5"}', '{"f":"6"}']
    texts = pa.array(rows, pa.string()).slice(1, 4)
    found = plain.decode(texts, np.ones(4, dtype=bool))
    assert found.taken.tolist() == [True, True, False, True]
    assert found.maps.to_pylist() == [[("b", "2"), ("c", "3")], [("d", "4")], None, [("f", "6")]]
    assert found.columns["c"].to_pylist() == ["3", None, None, None]


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": "b"}',  # whitespace between tokens
        '{ "a":"b"}',
        '{"a":"b" }',
        '{"a":"b","a":"c"}',  # a key twice: the reference keeps the last
        '{"a":"b\\"c"}',  # an escape
        '{"a":"\\u0041"}',
        '{"a":null}',
        '{"a":1}',
        '{"a":"b","c":true}',
        '{"a":"b",,"c":"d"}',
        '{"a":"b""c":"d"}',
        '{"a":"b":"c":"d"}',
        '{"a":"b","c"}',
        '{"a"}',
        '{"a":"b",}',
        '{,"a":"b"}',
        '{"a":["b"]}',
        '{"a":{"b":"c"}}',
        "{ }",
        '{"a":"b"}{"c":"d"}',
        '{"a":"b"x}',
    ],
)
def test_anything_but_the_plain_form_is_left_to_the_caller(raw: str) -> None:
    clean = '{"k":"v"}'
    found = decode([clean, raw, clean])
    assert found.taken.tolist() == [True, False, True]
    assert found.maps.to_pylist() == [[("k", "v")], None, [("k", "v")]]


@pytest.mark.parametrize("bincount_limit", [plain._BINCOUNT_LIMIT, 0])  # 0: the sort path
def test_a_row_repeating_a_key_is_left_to_the_caller_either_way(monkeypatch, bincount_limit: int) -> None:
    monkeypatch.setattr(plain, "_BINCOUNT_LIMIT", bincount_limit)
    rows = ['{"a":"1","b":"2"}', '{"a":"1","b":"2","a":"3"}', '{"b":"2","a":"1"}', '{"c":"1","c":"1"}']
    found = decode(rows)
    assert found.taken.tolist() == [True, False, True, False]
    assert found.maps.to_pylist() == [[("a", "1"), ("b", "2")], None, [("b", "2"), ("a", "1")], None]
    assert found.columns["a"].to_pylist() == ["1", None, "1", None]


@settings(max_examples=300, deadline=None)
@given(st.lists(plain_maps, min_size=1, max_size=10))
def test_compact_json_of_plain_strings_is_taken(maps: list[dict[str, str]]) -> None:
    rows = [orjson.dumps(m).decode() for m in maps]
    found = decode(rows)
    assert found.taken.all()
    assert found.maps.to_pylist() == [list(m.items()) for m in maps]


def mutated(draw: st.DrawFn) -> str:
    text = orjson.dumps(draw(plain_maps)).decode()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(['"', ":", ",", "{", "}", " ", "\\", "a", "1", "null", "", '""', '":"']))
        cut = draw(st.integers(0, 2))
        text = text[:at] + piece + text[at + cut :]
    return text


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.composite(mutated)(), min_size=1, max_size=8))
def test_a_taken_row_is_json_that_decodes_to_exactly_its_map(rows: list[str]) -> None:
    """Soundness on near misses: valid rows with a few bytes inserted, cut or replaced. The decoder's
    precondition (the caller checks it) is a row shaped ``{...}`` of valid UTF-8 without control bytes."""
    rows = [r for r in rows if r.startswith("{") and r.endswith("}")]
    if not rows:
        return
    found = decode(rows)
    for raw, taken, entries in zip(rows, found.taken, found.maps.to_pylist()):
        if not taken:
            assert entries is None
            continue
        pairs = orjson.loads(raw)  # raises if the decoder took text that is not JSON
        assert isinstance(pairs, dict) and all(isinstance(v, str) for v in pairs.values()), raw
        assert entries == list(pairs.items()), raw  # same entries, same order, no key lost to a repeat
