-- The columns of a table, to tell a queue table from any other table before sending to it: an address
-- read from SubscriptionRouting may name anything. Their names as they are: PostgreSQL's are
-- case-sensitive, and a send writes the lower-case ones (a "Headers" column is not headers). From
-- pg_catalog, which shows them whatever this login may do (information_schema hides a table the login
-- has no right on, which then read as missing rather than as not granted).
SELECT a.attname
FROM pg_catalog.pg_attribute AS a
JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relname = :table AND a.attnum > 0 AND NOT a.attisdropped;
