"""Lake roots with characters a URI would encode (a space, a percent sign): deltalake hands back
percent-encoded file URIs for local tables, which pyarrow and Spark would take literally."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from queuelake.lake.deletes import RowFilter
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.increments import added_files, snapshot_files


@pytest.mark.parametrize("folder", ["with space", "100% sure", "o'brien lake"])
def test_a_root_that_needs_encoding_reads_back(tmp_path: Path, folder: str) -> None:
    lake = DeltaRsEngine(str(tmp_path / folder / "lake"))
    lake.append("t", pa.table({"a": [1, 2]}), "w", 1)
    lake.append("t", pa.table({"a": [3]}), "w", 2)
    assert sorted(lake.read_arrow("t")["a"].to_pylist()) == [1, 2, 3]
    upto = lake.table_version("t")
    assert upto is not None
    files = snapshot_files(lake.path("t"), upto)
    assert sum(pq.read_table(f).num_rows for f in files) == 3
    newest = added_files(lake.path("t"), upto - 1, upto)
    assert [pq.read_table(f)["a"].to_pylist() for f in newest] == [[3]]
    # the rows a filter reaches, and a delete of them (erase, retention, maintain): they read the
    # files by deltalake's URIs, and failed on the encoded root (found by a review)
    where = RowFilter('"a" = 2', pc.field("a") == 2, ("a",))
    assert lake.matching_rows("t", where, ["a"])["a"].to_pylist() == [2]
    assert lake.count_rows("t", where).rows == 1
    assert lake.delete_rows("t", where).rows == 1
    assert sorted(lake.read_arrow("t")["a"].to_pylist()) == [1, 3]


def test_a_local_root_deltalake_would_decode_is_a_config_error() -> None:
    from queuelake.config import from_dict
    from queuelake.errors import ConfigError

    with pytest.raises(ConfigError, match="rename the folder"):
        from_dict({"transport": {"connection": "x"}, "lake": {"root": "/data/per%20cent/lake"}}, env={})
    from_dict({"transport": {"connection": "x"}, "lake": {"root": "s3://bucket/a%20b"}}, env={})  # a URI: fine


@pytest.mark.parametrize("root", ["/data/lake[1]", "/data/la]ke", "/data/what?/lake"])
def test_a_local_root_deltalake_cannot_turn_into_a_url_is_a_config_error(root: str, tmp_path) -> None:
    """deltalake panics on a local root with brackets (an invalid URL host): say so at config load."""
    import pyarrow as pa
    from deltalake import write_deltalake
    from queuelake.config import from_dict
    from queuelake.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot be a Delta table root"):
        from_dict({"transport": {"connection": "x"}, "lake": {"root": root}}, env={})
    if "[" in root:  # the reason: what deltalake does with such a folder
        with pytest.raises(BaseException, match="object store url"):
            write_deltalake(str(tmp_path / "lake[1]" / "t"), pa.table({"a": [1]}))


def test_partition_folders_keep_their_escaping_under_an_encoded_root(tmp_path: Path) -> None:
    """Partition folders are Hive-escaped on disk (``q=x%20y``) and deltalake does not encode them
    again, while it does encode the root: only the root may be decoded."""
    lake = DeltaRsEngine(str(tmp_path / "with space" / "lake"))
    lake.create_table("p", pa.schema([("q", pa.string()), ("v", pa.int64())]), partition_by=["q"])
    lake.append("p", pa.table({"q": ["x y", "a/b", "c%d"], "v": [1, 2, 3]}), "w", 1)
    got = lake.read_arrow("p")
    assert sorted(zip(got["q"].to_pylist(), got["v"].to_pylist())) == [("a/b", 2), ("c%d", 3), ("x y", 1)]
    files = snapshot_files(lake.path("p"), lake.table_version("p") or 0)
    assert sum(pq.read_table(f).num_rows for f in files) == 3


@pytest.mark.parametrize("root", ["/data/h#x/lake", "s3://bucket/team#1/lake"])
def test_a_root_holding_a_hash_is_a_config_error(root: str, tmp_path) -> None:
    """deltalake writes a table under a root with '#' but reads no history of it (a review: erase and
    maintain failed after their first delete, bodies reported 0 rows written): say so at config load."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from queuelake.config import from_dict
    from queuelake.errors import ConfigError

    with pytest.raises(ConfigError, match="holds '#'"):
        from_dict({"transport": {"connection": "x"}, "lake": {"root": root}}, env={})
    table = str(tmp_path / "h#x" / "t")  # the reason: what deltalake does with such a folder
    write_deltalake(table, pa.table({"a": [1]}))
    assert DeltaTable(table).version() == 0 and DeltaTable(table).history() == []


@pytest.mark.parametrize(
    ("root", "said"),
    [
        ("s3:/nobucket/lake", "a URI needs two slashes after s3: (as s3://...)"),
        ("abfss:/c@acct.dfs.core.windows.net/lake", "two slashes after abfss:"),
        ("ftp://host/x", "ftp:// is no store the lake can be in"),
    ],
)
def test_a_root_that_is_no_store_is_a_config_error(root: str, said: str) -> None:
    """``s3:/nobucket`` was a local folder, and a drain wrote ``./s3:/nobucket/messages``, exit 0; ``ftp://``
    failed as "unexpected" inside pyarrow (a review)."""
    from queuelake.config import from_dict
    from queuelake.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(said)):
        from_dict({"transport": {"connection": "x"}, "lake": {"root": root}}, env={})
    # and what loaded before the check: wasbs/s3n (delta-spark with hadoop-azure/-aws), a one-slash file URI
    fine_roots = ("s3://b/lake", "gs://b/lake", "abfss://c@a.dfs.core.windows.net/l", "/data/lake", "./lake", "C:/lake")
    for fine in (*fine_roots, "wasbs://c@a.blob.core.windows.net/l", "s3n://b/l", "file:/tmp/lake", "file:///tmp/l"):
        assert from_dict({"transport": {"connection": "x"}, "lake": {"root": fine}}, env={}).lake.root == fine
