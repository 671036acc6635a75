-- Rows whose seq is NULL: the transport's tables never hold one (seq is an identity), but a table
-- made by hand may. The receive takes rows by seq, so no drain can take these: after an empty
-- receive they are counted apart from the rows other sessions hold, and named as such.
SELECT count(*) FROM {queue} WHERE seq IS NULL;
