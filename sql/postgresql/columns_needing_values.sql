-- The columns of a table an INSERT must fill (lower-case names): NOT NULL, no default, not an identity
-- nor a generated column. One the send does not write makes every copy to the table fail.
SELECT lower(column_name) FROM information_schema.columns
WHERE table_schema = :schema AND table_name = :table
  AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO' AND is_generated = 'NEVER';
