"""The notebooks' queue helpers (``queuelake.notebooks.queues``) on the journal's own spellings of queues.

Found by a review: ``unquote_queues`` removed every quote, so a PostgreSQL queue named ``O'Brien"s``
(``"public"."O'Brien""s"`` in the journal) showed as public.O'Briens, one character short; and
``queue_rows`` took a qualified name for a table name in any schema (``public.error`` picked the rows of
``"other"."public.error"`` too).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from queuelake.notebook_support import queue_rows, unquote_queues
from queuelake.notebooks.queues import queue_matches, unquoted

QUEUES = {
    '"public"."error"': "public.error",
    '"audit"."error"': "audit.error",
    '"other"."public.error"': "other.public.error",
    '"public"."Sales.Orders"': "public.Sales.Orders",
    '"Sales"."Orders"': "Sales.Orders",
    '"public"."O\'Brien""s"': "public.O'Brien\"s",
    '"public"."""quoted"""': 'public."quoted"',
    "error@[dbo]@[nsb]": "error@[dbo]@[nsb]",
    "error@[public]": "error@[public]",
    "Orders@[Sales]": "Orders@[Sales]",
}


CASES = [  # a queue parameter as a user writes it -> the queues it picks (unquoted)
    ("", set(QUEUES.values())),
    ("error", {"public.error", "audit.error", "error@[dbo]@[nsb]", "error@[public]"}),
    ("public.error", {"public.error", "error@[public]"}),
    ('"public"."error"', {"public.error", "error@[public]"}),
    ("audit.error", {"audit.error"}),
    ('"Sales.Orders"', {"public.Sales.Orders"}),
    ("Sales.Orders", {"Sales.Orders", "Orders@[Sales]"}),
    ("Orders", {"Sales.Orders", "Orders@[Sales]"}),
    ('"public"."O\'Brien""s"', {"public.O'Brien\"s"}),
    ("public.O'Brien\"s", {"public.O'Brien\"s"}),
    ("O'Brien\"s", {"public.O'Brien\"s"}),
    ('"""quoted"""', {'public."quoted"'}),
    ("error@[dbo]", {"error@[dbo]@[nsb]"}),
    ("other.public.error", {"other.public.error"}),
]


def test_notebook_queue_helpers(spark: Any) -> None:
    """Both helpers, the cases of each frame in one Spark job (each case a collect of its own took seconds)."""
    journal = spark.createDataFrame([(queue,) for queue in QUEUES], "queue string")
    shown = unquote_queues(journal)
    assert [r.queue for r in shown.collect()] == list(QUEUES.values())  # a doubled quote inside a name is one
    missed = []
    # the journal's own spelling, or the notebooks' unquoted one
    for name, frame in {"journal": journal, "unquoted": shown}.items():
        wanted = [
            (queue_matches(queue) if queue else F.lit(True)).alias(f"case{i}") for i, (queue, _) in enumerate(CASES)
        ]
        rows = frame.select(F.col("queue"), unquoted(F.col("queue")).alias("again"), *wanted).collect()
        assert [r.again for r in rows] == list(QUEUES.values())  # unquoting what is unquoted changes nothing
        for i, (queue, expected) in enumerate(CASES):
            picked = {QUEUES.get(r.queue, r.queue) for r in rows if r[f"case{i}"]}
            if picked != expected:
                missed.append(f"{name} {queue!r}: {sorted(picked)} != {sorted(expected)}")
    assert not missed, "\n".join(missed)
    # queue_rows is queue_matches' filter
    assert {r.queue for r in queue_rows(shown, "public.error").collect()} == {"public.error", "error@[public]"}
