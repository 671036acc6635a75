"""Durations in the unit that fits them (hours for hours, milliseconds for a fraction of a second),
one unit per panel or table, so that its values stay comparable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# Units for durations, smallest first: a value is shown in the largest unit it fills at least twice.
DURATION_UNITS: list[tuple[str, float]] = [("ms", 0.001), ("s", 1.0), ("min", 60.0), ("h", 3600.0), ("days", 86400.0)]


def duration_unit(largest_seconds: float) -> tuple[str, float]:
    """The unit (name, seconds) that fits durations up to ``largest_seconds``: 7200 s read as 2 h, 0.9 s as
    900 ms. One unit per panel or table, chosen by its largest value, so that values stay comparable."""
    chosen = DURATION_UNITS[0]
    for unit in DURATION_UNITS:
        if largest_seconds >= 2 * unit[1]:
            chosen = unit
    return chosen


def in_unit(pdf: pd.DataFrame, columns: Sequence[str], seconds_per_value: float = 1.0) -> tuple[pd.DataFrame, str]:
    """``columns`` (durations, ``seconds_per_value`` seconds each) converted to the unit that fits their
    largest value and renamed ``<column>_<unit>``; returns the table and the unit."""
    largest = float(np.nanmax(pdf[list(columns)].to_numpy(dtype=float))) * seconds_per_value if len(pdf) else 0.0
    unit, size = duration_unit(largest if np.isfinite(largest) else 0.0)
    out = pdf.copy()
    for column in columns:
        out[column] = out[column].astype(float) * seconds_per_value / size
    return out.rename(columns={c: f"{c}_{unit}" for c in columns}), unit
