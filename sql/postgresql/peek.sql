-- Estimated depth, as the transport peeks: the seq span of committed rows (MVCC, takes no locks).
SELECT COALESCE(max(seq) - min(seq) + 1, 0) AS depth FROM {queue};
