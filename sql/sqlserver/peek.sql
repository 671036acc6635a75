-- Estimated depth, as the transport peeks: the RowVersion span of rows nobody holds.
-- The transport's own form, kept: SQL Server's optimizer rewrites MIN/MAX of an index's leading key
-- as an ordered TOP (1) seek at each end, not as an aggregate over a scan (PostgreSQL planned the
-- latter on stale statistics; see its file). With no row holding a RowVersion, a row whose
-- RowVersion is NULL (a table made by hand) makes the depth 1, so the drain looks and names such rows.
-- Not verified: no SQL Server ran to show this plan.
SELECT COALESCE(
    max(RowVersion) - min(RowVersion) + 1,
    (SELECT TOP (1) 1 FROM {queue} WITH (READPAST) WHERE RowVersion IS NULL),
    0
) AS depth FROM {queue} WITH (READPAST);
