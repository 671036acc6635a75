"""Tables as the notebooks show them: every time as ``TIME_FORMAT`` in UTC, counts as integers (not
``2045.0``), measurements with at most 2 decimals, a missing value as ``MISSING``.

Its own module because both the printed tables (``table_text``) and Databricks' interactive ones
(``typed_table``) follow these rules, and the plot titles write times the same way (``utc_text``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from queuelake.timetext import shown_utc

# Every time a notebook prints, in tables and text alike: one format, always UTC, said so. As strftime would
# write it, but written by ``timetext.shown_utc``: strftime's %Y gives ``1`` for year 1.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
# What a table shows for a value that is missing (null): not NaN, None or NaT.
MISSING = "-"


def utc_text(value: Any) -> str:
    """A time as ``TIME_FORMAT`` (naive times are taken as UTC, as Spark's UTC session gives them)."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return shown_utc(stamp.to_pydatetime(warn=False), "seconds") + " UTC"


def _integral(series: pd.Series) -> bool:
    """A float column whose every value is a whole number: counts that a null or a sum made float."""
    values = series.dropna()
    return pd.api.types.is_float_dtype(series) and bool(np.all(np.isfinite(values))) and bool((values % 1 == 0).all())


def typed_table(pdf: pd.DataFrame) -> pd.DataFrame:
    """``pdf`` with whole-number float columns as nullable integers and times as UTC, for an interactive table
    that still sorts by value."""
    out = pdf.copy()
    for column in out.columns:
        series = out[column]
        if pd.api.types.is_datetime64_any_dtype(series):
            out[column] = series.dt.tz_localize("UTC") if series.dt.tz is None else series.dt.tz_convert("UTC")
        elif _integral(series):
            out[column] = series.astype("Int64")
    return out


def _number_text(value: float) -> str:
    """A measurement as text: at most 2 decimals, trailing zeros dropped (``467`` not ``467.0``)."""
    text = f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def table_text(pdf: pd.DataFrame) -> str:
    """``pdf`` as text: counts as integers (not ``2045.0``), measurements with at most 2 decimals, a missing
    value as ``MISSING`` (not ``NaN``/``None``/``NaT``), every time as ``TIME_FORMAT``."""
    if not len(pdf):
        return "(no rows)"
    out = typed_table(pdf)
    for column in out.columns:
        series = out[column]
        if pd.api.types.is_datetime64_any_dtype(series):
            text = [utc_text(v) if pd.notna(v) else MISSING for v in series]
        elif pd.api.types.is_integer_dtype(series):
            text = [str(int(v)) if pd.notna(v) else MISSING for v in series]
        elif pd.api.types.is_float_dtype(series):
            text = [_number_text(float(v)) if pd.notna(v) else MISSING for v in series]
        else:
            text = [MISSING if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in series]
        out[column] = pd.Series(text, index=out.index, dtype=object)
    return out.to_string(index=False)
