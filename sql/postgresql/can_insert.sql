-- Whether this login may insert into the table (a table another team owns may not grant it): on the
-- table, or on its columns (a grant of INSERT (id, expires, headers, body) is enough), in a schema it
-- may use.
SELECT has_any_column_privilege(c.oid, 'INSERT') AND has_schema_privilege(n.oid, 'USAGE')
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relname = :table;
