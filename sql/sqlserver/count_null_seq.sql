-- Rows whose RowVersion is NULL: the transport's tables never hold one (an identity column), but a
-- table made by hand may. The receive takes rows by RowVersion, so no drain can take these: after
-- an empty receive they are counted apart from the rows other sessions hold, and named as such.
SELECT COUNT_BIG(*) FROM {queue} WITH (READUNCOMMITTED) WHERE RowVersion IS NULL;
