-- The database's UTC clock. Inside a transaction now() is fixed, so values computed from this
-- equal what now() would give in a statement of the same transaction.
SELECT now() AT TIME ZONE 'UTC' AS utc_now;
