-- Estimated depth, as the transport peeks: the seq span of committed rows (MVCC, takes no locks).
-- Each end is one probe of the seq index (ORDER BY ... LIMIT 1), not max(seq) - min(seq): on a
-- table whose statistics say "empty" the planner aggregates those over a scan of the whole index.
-- The probe of the head still steps over the dead entries a drain leaves there. NULLs are left out:
-- DESC sorts them first, and a table not made by the transport may allow one (the depth read 0).
-- With no row holding a seq, a row whose seq is NULL makes the depth 1, so the drain looks and names
-- such rows (read as "empty", they stayed in the table unreported: a review). A NOT NULL seq (the
-- transport's tables) makes that probe free.
SELECT COALESCE(
    (SELECT seq FROM {queue} WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1)
    - (SELECT seq FROM {queue} WHERE seq IS NOT NULL ORDER BY seq LIMIT 1) + 1,
    (SELECT 1 FROM {queue} WHERE seq IS NULL LIMIT 1),
    0
) AS depth;
