"""Value axes, legends and bars that do not mislead: every axis on which values are compared is linear
and starts at zero (a log axis that starts at 450 ms makes 467 ms look like a sliver of 829 ms), counts
have whole-number ticks, bars carry their values, and legends sit outside the axes, where they cover
nothing. matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def value_axis(ax: Axes, axis: str = "y", counts: bool = False) -> None:
    """The value axis of a bar chart or rate: linear, from 0 (never a log scale, never a window that starts
    near the smallest value, which turns 467 against 829 into a sliver against a bar); with ``counts`` the
    ticks are whole numbers (3 messages, never 2.5)."""
    from matplotlib.ticker import MaxNLocator

    scale = ax.set_yscale if axis == "y" else ax.set_xscale
    limits = ax.get_ylim if axis == "y" else ax.get_xlim
    set_limits = ax.set_ylim if axis == "y" else ax.set_xlim
    scale("linear")
    ax.relim()
    ax.autoscale_view()
    top = limits()[1]
    set_limits(0, max(top, 1) if counts else (top if top > 0 else 1))
    if counts:  # steps of 1, 2, 5 or 10 times a power of ten: never 0, 6, 12, ...
        locator = MaxNLocator(integer=True, steps=[1, 2, 5, 10], min_n_ticks=2)
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(locator)


def legend_outside(ax: Axes, title: str | None = None) -> None:
    """The legend to the right of the axes, outside them, so that it never covers a bar or a line (inside,
    "best" still lands on data when every corner has some). No legend for a single unlabelled series."""
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
            fontsize="small",
            title=title,
            title_fontsize="small",
        )


def decimals_for(largest: float) -> Callable[[float], str]:
    """How values up to ``largest`` are written on bars: one number of decimals for the whole panel (2.00 h
    beside 1.93 h, not 2 beside 1.93), fewer for larger values."""
    places = 0 if largest >= 100 else 1 if largest >= 10 else 2
    return lambda v: f"{v:,.{places}f}"


def label_bars(
    ax: Axes, containers: Sequence[Any], text: Callable[[float], str], values: Sequence[float] | None = None
) -> None:
    """Each bar's value written at its end (or ``values``, e.g. the totals of a stack, at the top one's end):
    the number is readable even where a bar is short beside a long one on a linear axis."""
    for container in containers:
        shown = container.datavalues if values is None else values
        ax.bar_label(container, labels=[text(float(v)) for v in shown], fontsize="x-small", padding=2)
    # room for the labels past the longest bar
    horizontal = bool(containers) and getattr(containers[0], "orientation", "vertical") == "horizontal"
    low, high = ax.get_xlim() if horizontal else ax.get_ylim()
    (ax.set_xlim if horizontal else ax.set_ylim)(low, high * 1.12)


def grouped_bars(
    ax: Axes,
    table: pd.DataFrame,
    text: Callable[[float], str],
    horizontal: bool = False,
    stacked: bool = False,
    counts: bool = False,
) -> None:
    """One group of bars per row of ``table`` (its index the group's label), one bar per column (side by side,
    or ``stacked``), on a linear value axis from 0 with each bar's value written on it and the legend outside."""
    positions = np.arange(len(table))
    columns = list(table.columns)
    width = 0.8 if stacked else 0.8 / max(len(columns), 1)
    base = np.zeros(len(table))
    containers = []
    for i, column in enumerate(columns):
        values = table[column].to_numpy(dtype=float)
        offset = 0.0 if stacked else (i - (len(columns) - 1) / 2) * width
        draw = ax.barh if horizontal else ax.bar
        containers.append(draw(positions + offset, np.nan_to_num(values), width, base, label=str(column)))
        if stacked:
            base = base + np.nan_to_num(values)
    labels = [str(v)[-55:] for v in table.index]
    if horizontal:
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()  # the first row (the largest) on top
    else:
        ax.set_xticks(
            positions, labels, rotation=30 if len(table) > 1 else 0, ha="right" if len(table) > 1 else "center"
        )
    value_axis(ax, "x" if horizontal else "y", counts=counts)
    if stacked:  # the total on top of each stack, not the top part's own height
        label_bars(ax, containers[-1:], text, list(base))
    else:
        label_bars(ax, containers, text)
    ax.grid(axis="x" if horizontal else "y", alpha=0.3)
    if len(columns) > 1:
        legend_outside(ax)
