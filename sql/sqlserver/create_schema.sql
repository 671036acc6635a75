-- SQL Server: schemas are a DBA's decision; queuelake never creates one. Intentionally a no-op.
SELECT 1 AS schema_not_created;
