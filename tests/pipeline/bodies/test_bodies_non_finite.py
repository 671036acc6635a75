""".NET's non-finite doubles in JSON bodies: Newtonsoft writes ``double.NaN`` as the text ``"NaN"`` (its
default FloatFormatHandling.String), System.Text.Json too with AllowNamedFloatingPointLiterals. One such
value made a double field a string column, every value its text (a review). No Spark here: its
``from_json`` reads those texts into a double column as NaN, inf and -inf (tried with Spark 4.1)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, StringType
from queuelake.pipeline.bodies.infer import infer


@pytest.mark.parametrize("text", ['"NaN"', '"Infinity"', '"-Infinity"'])
def test_a_non_finite_double_keeps_its_field_a_double(text: str) -> None:
    schema, conflicts = infer(['{"Score": 1.5, "N": 2}', f'{{"Score": {text}, "N": {text}}}'], "json", False)
    assert schema["Score"].dataType == DoubleType() and schema["N"].dataType == DoubleType(), schema
    assert conflicts == []


def test_other_text_is_still_text() -> None:
    schema, conflicts = infer(['{"Code": "NaN"}', '{"Code": "abc"}', '{"Word": "nan"}'], "json", False)
    assert schema["Code"].dataType == StringType() and [c.kind for c in conflicts] == ["conflict"]
    assert schema["Word"].dataType == StringType()  # not .NET's spelling: text
