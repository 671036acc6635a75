"""Guids formatted a batch at once, and ServiceControl's unique ids of a batch: equal to the one-by-one
rules they replace (the uuid module; ``retry.unique_id_of``)."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.nsb import guids, retry


def test_guid_texts_are_the_uuid_modules() -> None:
    ids = np.frombuffer(os.urandom(16 * 500), np.uint8).reshape(500, 16)
    assert guids.texts(ids).to_pylist() == [str(uuid.UUID(bytes=bytes(row))) for row in ids]
    assert guids.texts_le(ids).to_pylist() == [str(uuid.UUID(bytes_le=bytes(row))) for row in ids]
    assert guids.texts(ids[:0]).to_pylist() == []


_VALUES = st.one_of(st.none(), st.sampled_from(["", "m-1", "Billing", "q@machine", "@", "a@b@c", "x\n@y"]), st.text())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_VALUES, _VALUES, _VALUES, _VALUES, _VALUES), max_size=12))
def test_unique_ids_are_the_per_message_rule(rows) -> None:
    """Whatever the headers hold (none, empty, several ``@``, a newline before one, any text)."""
    columns = [pa.array([row[i] for row in rows], pa.string()) for i in range(5)]
    assert retry.unique_ids(*columns).to_pylist() == [retry.unique_id_of(*row) for row in rows]
