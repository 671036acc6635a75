-- The columns of a table an INSERT must fill (lower-case names): NOT NULL, no default of their own nor
-- of their domain, not an identity nor a generated column. One the send does not write makes every
-- copy to the table fail. From pg_catalog, which shows a table's columns whatever this login may do.
-- None when the table has a BEFORE INSERT row trigger that fires in an ordinary session (tgenabled
-- 'O' or 'A'; a replica-only 'R' one does not) (NOT NULL is checked after it: it may fill the column)
-- or an enabled DO INSTEAD INSERT rule (the row may go elsewhere; a DO ALSO rule still writes it
-- here): the send decides there.
SELECT lower(a.attname)
FROM pg_catalog.pg_attribute AS a
JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type AS t ON t.oid = a.atttypid
WHERE n.nspname = :schema AND c.relname = :table AND a.attnum > 0 AND NOT a.attisdropped
  AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = ''
  AND t.typdefault IS NULL
  AND NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_trigger AS g
    WHERE g.tgrelid = c.oid AND NOT g.tgisinternal AND g.tgenabled IN ('O', 'A') AND (g.tgtype::int & 7) = 7
  )
  AND NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_rewrite AS r
    WHERE r.ev_class = c.oid AND r.ev_type = '3' AND r.is_instead AND r.ev_enabled IN ('O', 'A')
  );
