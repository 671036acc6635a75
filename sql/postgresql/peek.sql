-- Estimated depth, as the transport peeks: the seq span of committed rows (MVCC, takes no locks).
-- Each end is one probe of the seq index (ORDER BY ... LIMIT 1), not max(seq) - min(seq): on a
-- table whose statistics say "empty" the planner aggregates those over a scan of the whole index.
-- The probe of the head still steps over the dead entries a drain leaves there.
SELECT COALESCE(
    (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1) - (SELECT seq FROM {queue} ORDER BY seq LIMIT 1) + 1,
    0
) AS depth;
