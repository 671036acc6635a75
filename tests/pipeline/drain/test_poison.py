"""No poison batch (issue 10): nothing in a row's content makes ``build_batch`` raise.

Batches mix every kind of malformed header text beside valid rows and expired rows; each row must
come out exactly once, in order, landed (agreeing with the reference decoder ``headers.decode``),
expired, or quarantined with a reason and its raw text. Pure Arrow, no database.
"""

from __future__ import annotations

import collections
import datetime as dt

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from queuelake.commands.demo.traffic import MALFORMED_HEADERS, ORDER_EVENT, ORDER_PLACED, order_events
from queuelake.errors import HeaderError
from queuelake.nsb import batch_headers as native
from queuelake.nsb import columns, row_path
from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time, parse_time
from queuelake.pipeline.journal import build
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.quarantine import named_ids
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA
from queuelake.pipeline.journal.text import safe_text
from queuelake.transport.queues import RECEIVED_SCHEMA

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)
T = "2024-05-01 13:45:10:123456 Z"
GENERIC = "Ns.Wrapper`1[[Ns.Inner, Asm]], Asm, Version=1.0.0.0"
TIME_KEYS = [hdr.TIME_SENT, hdr.PROCESSING_STARTED, hdr.PROCESSING_ENDED, hdr.TIME_OF_FAILURE]
STRING_KEYS = [
    hdr.MESSAGE_ID,
    hdr.CONTENT_TYPE,
    hdr.CONVERSATION_ID,
    hdr.CORRELATION_ID,
    hdr.REPLY_TO_ADDRESS,
    hdr.ORIGINATING_ENDPOINT,
    hdr.ORIGINATING_MACHINE,
    hdr.PROCESSING_ENDPOINT,
    hdr.FAILED_QUEUE,
    hdr.EXCEPTION_TYPE,
    hdr.EXCEPTION_MESSAGE,
    hdr.VERSION,
    hdr.DELIVER_AT,
    hdr.TIME_TO_BE_RECEIVED,
]
ALL_KEYS = [*STRING_KEYS, *TIME_KEYS, hdr.MESSAGE_INTENT, hdr.ENCLOSED_MESSAGE_TYPES, "custom", "", "$.diag"]
FIELDS = [
    "message_id",
    "message_intent",
    "enclosed_message_types",
    "message_type",
    "content_type",
    "conversation_id",
    "correlation_id",
    "reply_to_address",
    "originating_endpoint",
    "originating_machine",
    "time_sent",
    "processing_started",
    "processing_ended",
    "processing_endpoint",
    "failed_queue",
    "exception_type",
    "exception_message",
    "time_of_failure",
]

Raw = str | bytes | None  # bytes: what the driver handed over is not valid UTF-8


def dumps(value: object) -> str:
    return orjson.dumps(value).decode()


# --- header values ---------------------------------------------------------------------------------

EPOCH = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)
SPAN_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(
    microseconds=1
)
valid_times = st.integers(min_value=0, max_value=SPAN_US).map(
    lambda us: format_time(EPOCH + dt.timedelta(microseconds=us))
)
# wire-shaped, mostly impossible (month 13, day 31 of April, hour 24, year 0000)
wire_shaped = st.tuples(*(st.integers(min_value=0, max_value=m) for m in (9999, 19, 39, 29, 69, 69, 999999))).map(
    lambda p: "{:04d}-{:02d}-{:02d} {:02d}:{:02d}:{:02d}:{:06d} Z".format(*p)
)
wrong_times = st.sampled_from(
    [
        "now",
        "yesterday",
        "",
        " ",
        "2024-02-30 10:00:00:000000 Z",
        "2023-02-29 10:00:00:000000 Z",
        "2024-02-29 10:00:00:000000 Z",  # valid: leap day
        "0000-01-01 00:00:00:000000 Z",  # Arrow parses year 0, Python does not
        "0001-01-01 00:00:00:000000 Z",
        "9999-12-31 23:59:59:999999 Z",
        "2024-13-01 13:45:10:123456 Z",
        "2024-00-10 13:45:10:123456 Z",
        "2024-04-31 13:45:10:123456 Z",
        "2024-05-01 24:00:00:000000 Z",
        "2024-05-01 23:59:60:000000 Z",
        "2024-05-01 23:60:00:000000 Z",
        "2024-05-01T13:45:10Z",
        "2024-05-01T13:45:10.123456Z",
        "2024-05-01 13:45:10.123456 Z",
        "2024-05-01 13:45:10:123456Z",
        "2024-05-01 13:45:10:123456 z",
        "2024-05-01 13:45:10:12345 Z",
        "2024-05-01 13:45:10:1234567 Z",
        "2024-5-1 13:45:10:123456 Z",
        " 2024-05-01 13:45:10:123456 Z",
        "2024-05-01 13:45:10:123456 Z ",
        "2024-05-01 13:45:10:123456 Z\n",
        "2024-05-01 13:45:10:123456 Z\x00",
        "\u0662\u0660\u0662\u0664-05-01 13:45:10:123456 Z",  # Arabic-Indic digits
        "\uff12\uff10\uff12\uff14-05-01 13:45:10:123456 Z",  # full-width digits
        "+2024-05-01 13:45:10:123456 Z",
        "12024-05-01 13:45:10:123456 Z",
        "1714571110",
        "9" * 5000,
    ]
)
times = st.one_of(valid_times, wrong_times, wire_shaped, st.text(max_size=8))
intents = st.one_of(
    st.sampled_from(
        [
            "Send",
            "Publish",
            "Subscribe",
            "Unsubscribe",
            "Reply",
            "send",
            "PUBLISH",
            " reply ",
            "\tSubscribe\n",
            "Reply\u3000",
            "\x1fSend",
            "SUBSCR\u0130BE",  # capital I with dot: Arrow lower-cases to "i", Python to "i" + U+0307
            "\u017fend",  # long s
            "Send\u200b",
            "Send\x00",
            "",
            "   ",
            "Broadcast",
            "Se nd",
            "Send;Publish",
        ]
    ),
    st.text(max_size=8),
)
enclosed = st.one_of(
    st.sampled_from(
        [
            f"{ORDER_PLACED};{ORDER_EVENT}",
            ORDER_PLACED,
            "A.B, Asm",
            "A.B",
            ";A.B, Asm; ;C.D, Asm;",
            "  A.B , Asm ;  C.D  ",
            GENERIC + ";Base, Asm",
            "Ns.Dict`2[[System.String, mscorlib],[System.Int32, mscorlib]], Asm",
            "Ns.Esc\\,aped, Asm",
            "\x1fA.B, Asm;C\u3000",
            "A.B\x1f, Asm",
            "A.B\u00a0, Asm",
            ";;;",
            ";",
            "",
            " ",
            ", Asm",
            "[[unbalanced, Asm",
            "]], Asm",
        ]
    ),
    st.text(alphabet=st.sampled_from("AB.,;[] `1\\\t\u3000"), max_size=12),
)
plain = st.one_of(st.text(max_size=6), st.sampled_from(["", "x\\/y", "\x00", "\u00e9", "\U0001f600", "x\x00y"]))


header_values = st.one_of(st.none(), times, intents, enclosed, plain)
header_dicts = st.dictionaries(st.sampled_from(ALL_KEYS), header_values, max_size=3)

# --- whole header texts, one strategy per kind ---------------------------------------------------

valid = st.fixed_dictionaries(
    {
        hdr.MESSAGE_ID: st.uuids().map(str),
        hdr.MESSAGE_INTENT: st.sampled_from(["Send", "Publish", "Reply"]),
        hdr.ENCLOSED_MESSAGE_TYPES: st.sampled_from([f"{ORDER_PLACED};{ORDER_EVENT}", ORDER_PLACED, GENERIC]),
        hdr.CONTENT_TYPE: st.just("application/json"),
        hdr.TIME_SENT: valid_times,
    },
    optional={hdr.PROCESSING_STARTED: valid_times, hdr.FAILED_QUEUE: plain, "custom": plain},
).map(dumps)
mixed = header_dicts.map(dumps)  # valid or not, mostly decided by the values
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        plain,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(plain, inner, max_size=3)),
    max_leaves=6,
)


def _big(base: dict, key: str, number: int) -> str:
    text = dumps({**base, key: "PLACEHOLDER"})
    return text.replace('"PLACEHOLDER"', str(number))


def _safe_abs(value: object) -> float:
    return abs(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


non_string = st.tuples(
    header_dicts,
    st.sampled_from(ALL_KEYS),
    st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.integers(min_value=2**64, max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.lists(json_values, max_size=3),
        st.dictionaries(plain, json_values, max_size=3),
    ),
).map(lambda t: _big(t[0], t[1], t[2]) if _safe_abs(t[2]) >= 2**63 else dumps({**t[0], t[1]: t[2]}))
top_level = st.one_of(
    st.sampled_from(["[]", "[1, 2]", '["a", "b"]', "1", "-0.5", "1e999", "null", "true", "false", '"text"', '""']),
    json_values.filter(lambda v: not isinstance(v, dict)).map(dumps),
)
invalid_json = st.one_of(
    st.sampled_from(
        [
            *MALFORMED_HEADERS.values(),
            "{",
            "}",
            "{'a': 'b'}",
            '{"a": "b",}',
            '{"a": "b"} trailing',
            '{"a" "b"}',
            "NaN",
            '{"a": NaN}',
            '{"a": "\x00"}',  # raw control character in a string
            "\x00",
            '{"a": "b"}\x00',
            "\ufeff{}",  # BOM
            '{"a": "\\x41"}',
            '{"a": "\\u12"}',
        ]
    ),
    st.tuples(valid, st.integers(min_value=1, max_value=60)).map(lambda t: t[0][: t[1]]),  # truncated
    st.text(max_size=16),
)
surrogates = st.sampled_from(
    [
        '{"a": "\\ud800"}',  # escaped lone surrogates: valid text, refused by the decoder
        '{"a": "\\udfff x"}',
        '{"\\ud83d": "b"}',
        '{"a": "\\ud83d\\ude00", "b": "x\\/y"}',  # a proper pair: valid
        b'{"a": "\xed\xa0\x80"}',  # CESU-8 lone surrogate bytes (nvarchar via a lax driver)
        b'{"a": "\xed\xb3\xbf"}',
        b'{"NServiceBus.MessageId": "\xff\xfe"}',
        b"\xff\xfe{\x00}\x00",  # UTF-16 text read as bytes
        b'{"a": "\xc3"}',  # truncated UTF-8
        b"\xc3",
    ]
)
nul = st.sampled_from(
    [
        '{"a": "\\u0000"}',
        '{"\\u0000": "x"}',
        '{"NServiceBus.MessageId": "\\u0000"}',
        '{"NServiceBus.MessageIntent": "Send\\u0000"}',
        '{"NServiceBus.TimeSent": "2024-05-01 13:45:10:123456 Z\\u0000"}',
        '{"NServiceBus.EnclosedMessageTypes": "A.B\\u0000, Asm"}',
        "\x00{}",
    ]
)
huge = st.sampled_from(
    [
        dumps({"custom": "x" * 200_000, hdr.TIME_SENT: T}),
        dumps({"k" * 50_000: "v"}),
        dumps({hdr.TIME_SENT: "2" * 100_000}),
        dumps({hdr.MESSAGE_INTENT: "Send" * 20_000}),
        dumps({hdr.ENCLOSED_MESSAGE_TYPES: ";".join(["A.B, Asm"] * 10_000)}),
        dumps({f"k{i}": str(i) for i in range(5_000)}),
    ]
)
deep = st.sampled_from(
    [
        "[" * 5000 + "]" * 5000,
        '{"a":' * 2000 + '"x"' + "}" * 2000,
        '{"a":' * 1000 + '"x"' + "}" * 1000,  # within orjson's depth limit: a nested object value
        '{"a": ' + "[" * 500 + "]" * 500 + "}",
        '{"a": ' + "[" * 5000,
    ]
)
duplicates = st.sampled_from(
    [
        '{"a": "1", "a": "2"}',
        '{"a": 1, "a": "x"}',
        '{"a": "x", "a": 1}',
        '{"NServiceBus.MessageIntent": "Send", "NServiceBus.MessageIntent": "Bogus"}',
        '{"NServiceBus.MessageIntent": "Bogus", "NServiceBus.MessageIntent": "Send"}',
        '{"NServiceBus.TimeSent": "now", "NServiceBus.TimeSent": "2024-05-01 13:45:10:123456 Z"}',
        '{"NServiceBus.TimeSent": "2024-05-01 13:45:10:123456 Z", "NServiceBus.TimeSent": "now"}',
    ]
)
blank = st.sampled_from([None, "", " ", "   ", "\t\n", "\u3000", "\x1f", "{}", " {} ", "\n{}\n"])
bad_intent = st.tuples(header_dicts, intents).map(lambda t: dumps({**t[0], hdr.MESSAGE_INTENT: t[1]}))
odd_types = st.tuples(header_dicts, enclosed).map(lambda t: dumps({**t[0], hdr.ENCLOSED_MESSAGE_TYPES: t[1]}))
bad_time = st.tuples(header_dicts, st.sampled_from(TIME_KEYS), times).map(lambda t: dumps({**t[0], t[1]: t[2]}))
message_ids = st.tuples(header_dicts, st.sampled_from(["", " ", "not-a-uuid", "\x00", None])).map(
    lambda t: dumps({**t[0], hdr.MESSAGE_ID: t[1]})
)

KINDS: list[st.SearchStrategy[Raw]] = [
    valid,
    mixed,
    non_string,
    top_level,
    invalid_json,
    surrogates,
    nul,
    huge,
    deep,
    duplicates,
    blank,
    bad_intent,
    odd_types,
    bad_time,
    message_ids,
]
any_header = st.one_of(valid, valid, mixed, mixed, *KINDS)
odd_ids = st.sampled_from(["not-a-uuid", "", " ", "00000000-0000-0000-0000-000000000000", "ABC", "x" * 300])
BATCH = 200  # header texts per example; with 50 examples, 10,000 per run


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[str, bool, Raw]]:
    """About 200 rows: one of every malformed kind, the rest drawn from all kinds, shuffled; some
    row ids that are not uuids, some rows expired."""
    raws = [draw(kind) for kind in KINDS]
    raws += draw(st.lists(any_header, min_size=BATCH - len(KINDS), max_size=BATCH + 20))
    draw(st.randoms(use_true_random=False)).shuffle(raws)
    n = len(raws)
    ids = [f"00000000-0000-4000-8000-{k:012d}" for k in range(n)]
    for k, odd in draw(st.dictionaries(st.integers(0, n - 1), odd_ids, max_size=10)).items():
        ids[k] = odd
    expired = draw(st.sets(st.integers(0, n - 1), max_size=30))
    return [(ids[k], k in expired, raws[k]) for k in range(n)]


# --- building and checking -----------------------------------------------------------------------


def text(raw: Raw) -> str | None:
    """The header text as Python sees it: invalid UTF-8 surrogate-escaped (``queues._text``)."""
    return raw.decode("utf-8", errors="surrogateescape") if isinstance(raw, bytes) else raw


def received(rows: list[tuple[str, bool, Raw]]) -> pa.Table:
    """A received batch; the headers column may hold invalid UTF-8 (built as binary, viewed as string)."""
    n = len(rows)
    raw_bytes = [r.encode("utf-8") if isinstance(r, str) else r for _, _, r in rows]
    headers = pa.array(raw_bytes, pa.binary()).view(pa.string())
    return pa.Table.from_arrays(
        [
            pa.array([i for i, _, _ in rows], pa.string()),
            pa.array(range(1, n + 1), pa.int64()),
            pa.array([e for _, e, _ in rows], pa.bool_()),
            pa.array([NOW if e else None for _, e, _ in rows], pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()),
            headers,
            pa.array([f"body-{k}".encode() for k in range(n)], pa.binary()),
        ],
        schema=RECEIVED_SCHEMA,
    )


def rows_of(raws: list[Raw], expired: list[bool] | None = None) -> list[tuple[str, bool, Raw]]:
    expired = expired or [False] * len(raws)
    return [(f"00000000-0000-4000-8000-{k:012d}", e, r) for k, (e, r) in enumerate(zip(expired, raws))]


def check(rows: list[tuple[str, bool, Raw]]) -> tuple[pa.Table, dict[str, int]]:
    table, counts = build_batch(received(rows), "q", "b:1", NOW)
    assert table.schema == MESSAGES_SCHEMA
    out = table.to_pylist()
    assert len(out) == len(rows)
    assert [r["id"] for r in out] == [i for i, _, _ in rows]
    assert [r["seq"] for r in out] == list(range(1, len(rows) + 1))
    for k, ((row_id, is_expired, raw), row) in enumerate(zip(rows, out)):
        t = text(raw)
        where = (k, row_id, t if t is None or len(t) < 300 else t[:300] + "...")
        assert row["outcome"] in ("landed", "expired", "quarantined"), where
        assert (row["queue"], row["batch_id"], row["drained_at"]) == ("q", "b:1", NOW)
        if is_expired:
            assert row["outcome"] == "expired", where
            assert row["body"] is None and row["headers"] is None and row["expires"] == NOW, where
            assert row["error"] is None and row["raw_headers"] is None, where
            assert all(row[f] is None for f in FIELDS), where
            continue
        assert row["body"] == f"body-{k}".encode(), where
        try:
            ref = hdr.decode(t, row_id)
        except HeaderError as exc:
            assert row["outcome"] == "quarantined", where
            assert row["error"] == str(exc), where
        else:
            assert row["outcome"] == "landed", (where, row["error"])
            assert row["error"] is None and row["raw_headers"] is None, where
            # same entries; the order of a map carries no meaning (the native decode orders keys by
            # the batch's first sight of each)
            assert sorted(row["headers"]) == sorted(ref.headers.items()), where
            for f in FIELDS:
                assert row[f] == getattr(ref, f), (f, where)
            continue
        assert row["error"], where
        assert row["raw_headers"] == safe_text(t), where
        named = named_ids(t)  # the ids its headers name, for find and where; nothing else typed
        assert row["headers"] is None and all(row[f] == named.get(f) for f in FIELDS), where
    tally = collections.Counter(r["outcome"] for r in out)
    assert counts == {o: tally[o] for o in ("expired", "quarantined", "landed")}
    return table, counts


@settings(
    max_examples=50,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking 200-row batches is slow; failures name the row
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(batches())
def test_no_row_content_breaks_a_batch(rows: list[tuple[str, bool, Raw]]) -> None:
    assert len(rows) >= BATCH
    check(rows)


# --- the regression and the fallback -------------------------------------------------------------

NOW_AND_IMPOSSIBLE = [
    dumps({hdr.TIME_SENT: "now"}),
    dumps({hdr.TIME_SENT: "2024-02-30 10:00:00:000000 Z"}),
    dumps({hdr.MESSAGE_ID: "m1", hdr.TIME_SENT: T}),
]


@pytest.mark.parametrize("order", [[0, 1, 2], [1, 0, 2], [2, 1, 0]])
def test_wrong_shape_and_impossible_time_in_one_batch(order: list[int]) -> None:
    """Issue 10: a wrong-shaped and a wire-shaped but impossible TimeSent in one batch raised
    ArrowInvalid. The fast path itself must handle it (not only the fallback)."""
    raws = [NOW_AND_IMPOSSIBLE[k] for k in order]
    table, counts = build._build(received(rows_of(raws)), "q", "b:1", NOW)
    assert counts == {"expired": 0, "quarantined": 2, "landed": 1}
    by_raw = dict(zip(raws, table.to_pylist()))
    assert by_raw[NOW_AND_IMPOSSIBLE[0]]["outcome"] == "quarantined"
    assert "'now'" in by_raw[NOW_AND_IMPOSSIBLE[0]]["error"]
    assert by_raw[NOW_AND_IMPOSSIBLE[1]]["outcome"] == "quarantined"
    assert "2024-02-30" in by_raw[NOW_AND_IMPOSSIBLE[1]]["error"]
    assert by_raw[NOW_AND_IMPOSSIBLE[2]]["time_sent"] == parse_time(T)
    check(rows_of(raws))


def test_every_time_header_wrong_in_different_ways() -> None:
    """Each time column with its own mix of wrong shapes and impossible dates, across rows."""
    wrong = ["now", "2024-02-30 10:00:00:000000 Z", "0000-01-01 00:00:00:000000 Z", "2024-13-01 00:00:00:000000 Z"]
    raws = []
    for k, key in enumerate(TIME_KEYS):
        for j, value in enumerate(wrong):
            raws.append(dumps({key: value, TIME_KEYS[(k + 1) % 4]: wrong[(j + k) % 4] if j % 2 else T}))
        raws.append(dumps({key: T}))
    table, counts = build._build(received(rows_of(raws)), "q", "b:1", NOW)
    assert counts["landed"] == 4 and counts["quarantined"] == len(raws) - 4
    check(rows_of(raws))


def test_invalid_utf8_and_lone_surrogates_are_quarantined_with_escaped_text() -> None:
    raws: list[Raw] = [b'{"a": "\xed\xa0\x80"}', b"\xff", dumps({"a": "ok"})]
    table, counts = check(rows_of(raws))
    first, second, third = table.to_pylist()
    assert first["raw_headers"] == '{"a": "\\xed\\xa0\\x80"}' and second["raw_headers"] == "\\xff"
    assert third["outcome"] == "landed"
    # text from UTF-16 (nvarchar) may hold surrogates that are not escaped bytes
    assert safe_text('{"a": "\ud800\udcff"}') == '{"a": "\\ud800\\xff"}'


def test_empty_batch() -> None:
    table, counts = build_batch(received([]), "q", "b:1", NOW)
    assert table.num_rows == 0 and table.schema == MESSAGES_SCHEMA
    assert counts == {"expired": 0, "quarantined": 0, "landed": 0}


def sample_rows() -> list[tuple[str, bool, Raw]]:
    """Realistic rows with malformed and expired ones mixed in."""
    raws: list[Raw] = [m.headers for m in order_events(40)]
    raws[3] = MALFORMED_HEADERS["bad_time"]
    raws[7] = MALFORMED_HEADERS["non_string_value"]
    raws[11] = NOW_AND_IMPOSSIBLE[0]
    raws[12] = NOW_AND_IMPOSSIBLE[1]
    raws[20] = b"\xff"
    raws[25] = None
    raws[30] = MALFORMED_HEADERS["corrupted"]
    expired = [k in (5, 17, 33) for k in range(len(raws))]
    return rows_of(raws, expired)


def test_fallback_when_header_map_fails_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-batch build fails once: the halves build, and the rows equal the fast path's."""
    rows = sample_rows()
    expected, expected_counts = check(rows)
    real = row_path.header_map
    calls = []

    def fail_first(maps):
        calls.append(len(maps))
        if len(calls) == 1:
            raise pa.ArrowInvalid("injected")
        return real(maps)

    monkeypatch.setattr(row_path, "header_map", fail_first)
    table, counts = check(rows)
    assert len(calls) > 1
    assert counts == expected_counts
    assert table.equals(expected)


def test_fallback_down_to_single_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vectorised helper that only works on one row at a time: every row is built alone."""
    rows = sample_rows()
    expected, expected_counts = check(rows)
    real = columns.typed_columns

    def one_row_only(maps, ids, by_name=None):
        if len(maps) > 1:
            raise RuntimeError("injected")
        return real(maps, ids, by_name)

    monkeypatch.setattr(columns, "typed_columns", one_row_only)
    table, counts = check(rows)
    assert counts == expected_counts
    assert table.to_pylist() == expected.to_pylist()
    assert table.equals(expected)


def test_row_that_always_fails_is_quarantined_with_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row no build can handle becomes a quarantined row: the error, raw text and body kept; the
    other rows are exactly what the fast path gives."""
    rows = sample_rows()
    expected = check(rows)[0].to_pylist()
    poison = rows[9][2]
    real = row_path.parse_fast

    def choke(raw):
        if raw == poison:
            raise MemoryError("injected " + "x" * 5000)
        return real(raw)

    real_native = native.parse

    def native_choke(texts: pa.Array):  # the native decode cannot take it either
        if _as_text(poison) in texts.cast(pa.binary()).to_pylist():
            raise MemoryError("injected in the native decode")
        return real_native(texts)

    monkeypatch.setattr(row_path, "parse_fast", choke)
    monkeypatch.setattr(native, "parse", native_choke)
    table, counts = build_batch(received(rows), "q", "b:1", NOW)
    out = table.to_pylist()
    assert [r["id"] for r in out] == [i for i, _, _ in rows]
    assert counts == {"expired": 3, "quarantined": 7, "landed": 30}
    bad = out[9]
    assert bad["outcome"] == "quarantined"
    assert bad["error"].startswith("journal could not be built for this row: MemoryError: injected xxx")
    assert len(bad["error"]) < 1200
    assert bad["raw_headers"] == poison and bad["body"] == b"body-9" and bad["headers"] is None
    assert all(bad[f] == named_ids(poison).get(f) for f in FIELDS)
    assert out[:9] == expected[:9] and out[10:] == expected[10:]


def _as_text(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", errors="surrogateescape")


def test_quarantined_by_fallback_keeps_the_reference_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row that fails the build and that the reference refuses gets the reference's reason."""
    rows = rows_of([NOW_AND_IMPOSSIBLE[0], NOW_AND_IMPOSSIBLE[2]])
    monkeypatch.setattr(columns, "typed_columns", lambda maps, ids, by_name=None: 1 / 0)
    table, counts = build_batch(received(rows), "q", "b:1", NOW)
    first, second = table.to_pylist()
    with pytest.raises(HeaderError) as refused:
        hdr.decode(NOW_AND_IMPOSSIBLE[0])
    assert first["error"] == str(refused.value)
    assert second["outcome"] == "quarantined" and "ZeroDivisionError" in second["error"]
    assert counts == {"expired": 0, "quarantined": 2, "landed": 0}
