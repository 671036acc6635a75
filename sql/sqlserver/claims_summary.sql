-- Unresolved claims per queue, for status: a claim older than a drain's runtime means a drain died
-- after its DB commit and no drain of that queue has run since.
SELECT queue, COUNT_BIG(*), sum(row_count), min(claimed_at) FROM {table} GROUP BY queue ORDER BY queue;
