"""Times written for people and for SQL engines keep four-digit years: ``strftime``'s ``%Y`` gives ``1`` for
year 1 on glibc, which a Delta delete could not parse (``erase``, retention) and which broke tables' columns
(``find``, conversation pictures, the notebooks). Also: times read back from microseconds stay exact at
.NET's ``DateTime.MaxValue`` (through a float they became year 10000)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import matplotlib
import pandas as pd
from queuelake.notebooks.frames import every_bucket, times_from_micros
from queuelake.notebooks.tables import table_text, utc_text
from queuelake.notebooks.time_charts import date_numbers, time_axis
from queuelake.pipeline.conversation import svg
from queuelake.pipeline.find import show
from queuelake.timetext import iso_utc, shown_utc

UTC = dt.timezone.utc
FIRST = dt.datetime(1, 1, 1, tzinfo=UTC)
LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
LAST_MICROS = 253402300799999999


def test_years_keep_four_digits() -> None:
    assert iso_utc(FIRST) == "0001-01-01T00:00:00.000000Z"
    assert iso_utc(LAST) == "9999-12-31T23:59:59.999999Z"
    assert iso_utc(dt.datetime(999, 12, 31, 22, tzinfo=dt.timezone(dt.timedelta(hours=-3)))) == (
        "1000-01-01T01:00:00.000000Z"
    )
    assert iso_utc(dt.datetime(999, 5, 1)) == "0999-05-01T00:00:00.000000Z"  # naive: UTC
    assert shown_utc(FIRST) == "0001-01-01 00:00:00.000" and shown_utc(LAST, "seconds") == "9999-12-31 23:59:59"


def test_find_and_conversations_show_every_year_alike() -> None:
    assert show._time(FIRST) == "0001-01-01 00:00:00.000" and show._time(LAST) == "9999-12-31 23:59:59.999"
    assert svg._utc(FIRST) == "0001-01-01 00:00:00.000 UTC"
    rows = [SimpleNamespace(when=FIRST), SimpleNamespace(when=None), SimpleNamespace(when=LAST)]
    assert svg._row_times(rows) == ["01-01 00:00:00.000", "-", "12-31 23:59:59.999"]  # type: ignore[arg-type]
    same_day = [SimpleNamespace(when=FIRST), SimpleNamespace(when=FIRST + dt.timedelta(seconds=1.5))]
    assert svg._row_times(same_day) == ["00:00:00.000", "00:00:01.500"]  # type: ignore[arg-type]


def test_notebook_times_from_micros_are_exact_at_the_ends() -> None:
    times = times_from_micros([LAST_MICROS, None, -62135596800000000])
    assert list(times[[0, 2]]) == [pd.Timestamp(LAST), pd.Timestamp(FIRST)] and pd.isna(times[1])
    flagged = times_from_micros(pd.Series([LAST_MICROS, 0]), pd.Series([False, True]))
    assert flagged[0] == pd.Timestamp(LAST) and pd.isna(flagged[1])
    assert [utc_text(t) for t in times[[0, 2]]] == ["9999-12-31 23:59:59 UTC", "0001-01-01 00:00:00 UTC"]
    text = table_text(pd.DataFrame({"first_failure": times, "failures": [1, 2, 3]}))
    assert [line.split()[-2:] for line in text.splitlines()[1:]] == [["UTC", "1"], ["-", "2"], ["UTC", "3"]], text
    assert "9999-12-31 23:59:59 UTC" in text and "0001-01-01 00:00:00 UTC" in text, text


def test_a_time_axis_over_ten_thousand_years_saves() -> None:
    """A picture whose times run from year 1 to DateTime.MaxValue (every time in it implausible, so the
    notebooks draw them as they are): its margins went past 9999, and matplotlib refused to save it. Its
    buckets are 365 days (``every_bucket``), not millions of days."""
    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    buckets = every_bucket(pd.DatetimeIndex([pd.Timestamp(FIRST), pd.Timestamp("9999-06-01", tz="UTC")]), "365 days")
    assert 9_990 < len(buckets) < 10_010 and buckets[0] <= pd.Timestamp(FIRST)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    time_axis(ax, pd.Timestamp(FIRST), pd.Timestamp(LAST), 365 * 86400)
    fig.savefig(io.BytesIO(), format="png")
    low, high = ax.get_xlim()
    assert low >= -719162.0 and high <= 2932897.0
    plt.close(fig)


def test_an_evening_to_midnight_axis_names_its_own_day() -> None:
    """The demo's evening (20:00-22:00, hourly): the axis ran to a midnight tick, and the date beside it
    named the next day (a review). It names the first tick's day; the midnight tick names the next."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, last = pd.Timestamp("2026-12-01 20:00", tz="UTC"), pd.Timestamp("2026-12-01 22:00", tz="UTC")
    fig, ax = plt.subplots()
    ax.plot(date_numbers([first, last]), [1, 2])
    time_axis(ax, first, last, 3600)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert ax.xaxis.get_major_formatter().get_offset() == "2026-Dec-01" and labels[-1] == "Dec-02", labels
    plt.close(fig)
