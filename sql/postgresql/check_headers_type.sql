-- The headers column's type: text is expected; varchar(n) can truncate large header sets.
SELECT data_type FROM information_schema.columns
WHERE table_schema = :schema AND table_name = :table AND column_name = 'headers';
