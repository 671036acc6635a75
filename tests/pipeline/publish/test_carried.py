"""The fingerprint and compare of ``publish.carried``: which rows a rewrite carried over unchanged."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from queuelake.pipeline.publish.carried import fingerprints, known, unchanged
from queuelake.pipeline.publish.rows import SENT_COLUMNS, table_of

UTC = dt.timezone.utc


def _row(key: str | None, **kw: object) -> dict:
    base = {
        "key": key,
        "message_type": "A.B",
        "intent": "Publish",
        "destination": None,
        "body": '{"a": 1}',
        "headers": {"h": "1", "g": "2"},
        "ttbr_ms": 5,
        "deliver_at": dt.datetime(2026, 1, 1, tzinfo=UTC),
        "correlation_id": "c",
        "conversation_id": None,
    }
    return {**base, **kw}


def test_any_wire_column_changed_changes_the_fingerprint_and_only_that_row() -> None:
    changes = {
        "key": "k1",
        "message_type": "A.C",
        "intent": "Send",
        "destination": "Billing",
        "body": '{"a": 2}',
        "headers": {"h": "1", "g": "3"},
        "ttbr_ms": None,
        "deliver_at": dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC),
        "correlation_id": None,
        "conversation_id": "None",
    }
    assert set(changes) == set(SENT_COLUMNS)
    rows = [_row("k0")] + [{**_row("k0"), name: value} for name, value in changes.items()]
    found = fingerprints(table_of(rows)).tolist()
    assert len(set(found)) == len(rows), "every change is a different row"
    assert fingerprints(table_of([_row("k0")])).tolist() == found[:1], "the same row, the same fingerprint"


def test_values_are_not_confused_across_columns_or_map_entries() -> None:
    moved = [
        _row("k", headers={"ab": "c"}),
        _row("k", headers={"a": "bc"}),
        _row("k", headers={"a": "b", "c": ""}),
        _row("k", headers={}),
        _row("k", headers=None),
        _row("k", correlation_id="", conversation_id=None),
        _row("k", correlation_id=None, conversation_id=""),
    ]
    assert len(set(fingerprints(table_of(moved)).tolist())) == len(moved)


def test_the_types_a_writer_stored_do_not_matter() -> None:
    """string_view (delta-rs rewrites), text bodies, a missing optional column, a slice of a batch."""
    rows = [_row(f"k{i}", correlation_id=None) for i in range(4)]
    plain = table_of(rows)
    stored = pa.table(
        {
            "key": pa.array([r["key"] for r in rows], pa.string_view()),
            "message_type": pa.array([r["message_type"] for r in rows], pa.string_view()),
            "intent": [r["intent"] for r in rows],
            "destination": pa.array([None] * 4, pa.string()),
            "body": [r["body"] for r in rows],  # text, not bytes
            "headers": pa.array([list(r["headers"].items()) for r in rows], pa.map_(pa.string(), pa.string())),
            "ttbr_ms": pa.array([5] * 4, pa.int32()),
            "deliver_at": pa.array([dt.datetime(2026, 1, 1)] * 4, pa.timestamp("ns")),  # naive: UTC
        }
    )
    assert fingerprints(stored).tolist() == fingerprints(plain).tolist()
    assert fingerprints(stored.slice(1, 2)).tolist() == fingerprints(plain).tolist()[1:3]


def test_unchanged_keys_are_the_rows_found_before_unless_their_key_also_changed() -> None:
    before = known([table_of([_row("a"), _row("b"), _row("c"), _row("d")])])
    now = table_of(
        [_row("a"), _row("b", body='{"a": 9}'), _row("c"), _row("c", ttbr_ms=7), _row("e"), _row(None), _row("a")]
    )
    keys, rows = unchanged(before, [now.slice(0, 3), now.slice(3)])
    assert keys == {"a"}  # b changed, c also holds a changed row, e is new, a null key is never sent
    assert rows == 2
    assert unchanged(known([]), [now]) == (set(), 0)


def test_a_large_exclusion_is_looked_up_row_by_row_with_the_same_answer() -> None:
    """A rewrite's carried-over keys can be the whole round: ``accepted`` then looks each row's key up
    rather than hashing every excluded key per batch (40 s for 300,000 keys), with the same mask."""
    from queuelake.pipeline.publish.rows import accepted

    keys = pa.array(["a", None, "b", "c"], pa.string_view())
    few = {"b"}
    many = {"b", *(f"x{i}" for i in range(100))}
    assert accepted(keys, few).to_pylist() == [True, False, False, True]
    assert accepted(keys, many).to_pylist() == [True, False, False, True]
    assert accepted(keys, frozenset(many)).to_pylist() == [True, False, False, True]
    assert accepted(pa.chunked_array([keys, keys]), many).to_pylist() == [True, False, False, True] * 2


def test_only_a_data_commit_that_removed_files_is_a_rewrite(tmp_path) -> None:
    """Appends, a DELETE and a compaction are no rewrite (a round of them reads nothing more); an
    overwrite is, naming the files of the version before that it removed."""
    from deltalake import DeltaTable, write_deltalake
    from queuelake.lake.increments import rewrite

    uri = str(tmp_path / "out")
    write_deltalake(uri, table_of([_row("a")]))
    write_deltalake(uri, table_of([_row("b")]), mode="append")
    write_deltalake(uri, table_of([_row("c")]), mode="append")
    assert rewrite(uri, 0, 2) is None
    DeltaTable(uri).delete("key = 'b'")
    DeltaTable(uri).optimize.compact()
    assert rewrite(uri, 2, 4) is None
    assert rewrite(uri, None, 4) is None
    before = {f.split("/")[-1] for f in DeltaTable(uri, version=4).file_uris()}
    write_deltalake(uri, table_of([_row("a"), _row("d")]), mode="overwrite")
    found = rewrite(uri, 4, 5)
    assert found is not None and found.commits == ((5, "WRITE"),) and found.gone == ()
    assert {f.split("/")[-1] for f in found.removed} == before
    assert rewrite(uri, 2, 5) is not None
