-- The newest row's RowVersion (no row when the queue is empty): the drain's backlog estimate is this
-- minus the highest RowVersion it has received (see the PostgreSQL file for why not peek), as one
-- probe of the RowVersion index's tail.
SELECT TOP (1) RowVersion AS newest FROM {queue} WITH (READPAST) ORDER BY RowVersion DESC;
