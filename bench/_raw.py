"""The raw limit of a send bench: the very rows a command wrote, loaded again by the fastest COPY a
client can do, in text and in binary format.

Why: a raw baseline that builds its rows in Python while the clock runs (``write_row`` per row)
measures the client as much as the database, and flatters the command it is compared with (issue
60: the project's "raw binary COPY" reached 52,000-69,000 rows/s where a load of the same rows did
125,000). Here the rows the command wrote are dumped once by the server itself (``COPY ... TO
STDOUT``, in batches of the command's batch size, in each format) into files; a raw load then reads
a batch's files (not timed) and times only the COPY of those bytes, one ``write`` each, and the
commit: one transaction per batch, every destination's COPY in it, as the command sends a batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

COLUMNS = "(id, expires, headers, body)"  # what a send writes (design section 4)
FORMATS = ("text", "binary")


@dataclass(frozen=True)
class Dump:
    """The rows of some queue tables in batches: ``files[k]`` holds batch k's file per table and
    format, ``{(qualified, format): path}``."""

    files: list[dict[tuple[str, str], Path]]
    rows: int


def _copy_out(conn: psycopg.Connection, sql: str, path: Path) -> None:
    with conn.cursor() as cur, cur.copy(sql) as copy, path.open("wb") as out:
        for data in copy:
            out.write(data)


def dump(uri: str, tables: list[str], batch: int, folder: Path) -> Dump:
    """Every row of ``tables`` (qualified names), batch by batch in seq order, in both formats."""
    folder.mkdir(parents=True, exist_ok=True)
    files: list[dict[tuple[str, str], Path]] = []
    rows = 0
    with psycopg.connect(uri) as conn:
        for t, table in enumerate(tables):
            seqs = [s for (s,) in conn.execute(f"SELECT seq FROM {table} ORDER BY seq").fetchall()]
            rows += len(seqs)
            for k, start in enumerate(range(0, len(seqs), batch)):
                if k == len(files):
                    files.append({})
                lo, hi = seqs[start], seqs[min(start + batch, len(seqs)) - 1]
                select = f"SELECT id, expires, headers, body FROM {table} WHERE seq BETWEEN {lo} AND {hi} ORDER BY seq"
                for fmt in FORMATS:
                    path = folder / f"t{t}-b{k}.{fmt}"
                    option = " (FORMAT BINARY)" if fmt == "binary" else ""
                    _copy_out(conn, f"COPY ({select}) TO STDOUT{option}", path)
                    files[k][(table, fmt)] = path
        conn.rollback()
    return Dump(files, rows)


def load(uri: str, rows: Dump, fmt: str) -> float:
    """Seconds spent in COPY and commit loading the dumped rows back (the tables emptied by the
    caller), a batch per transaction; reading the files is not timed."""
    option = " (FORMAT BINARY)" if fmt == "binary" else ""
    spent = 0.0
    with psycopg.connect(uri) as conn:
        for batch in rows.files:
            data = {table: path.read_bytes() for (table, f), path in batch.items() if f == fmt}
            started = time.perf_counter()
            for table, payload in data.items():
                with conn.cursor() as cur, cur.copy(f"COPY {table} {COLUMNS} FROM STDIN{option}") as copy:
                    copy.write(payload)
            conn.commit()
            spent += time.perf_counter() - started
    return spent
