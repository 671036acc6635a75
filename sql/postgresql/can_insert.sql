-- Whether this login may insert into the table (a table another team owns may not grant it).
SELECT has_table_privilege(c.oid, 'INSERT')
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relname = :table;
