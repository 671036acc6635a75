-- Estimated depth, as the transport peeks: the RowVersion span of rows nobody holds.
-- The transport's own form, kept: SQL Server's optimizer rewrites MIN/MAX of an index's leading key
-- as an ordered TOP (1) seek at each end, not as an aggregate over a scan (PostgreSQL planned the
-- latter on stale statistics; see its file). Not verified: no SQL Server ran to show this plan.
SELECT COALESCE(max(RowVersion) - min(RowVersion) + 1, 0) AS depth FROM {queue} WITH (READPAST);
