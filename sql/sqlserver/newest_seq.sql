-- The newest row's RowVersion (NULL when the queue is empty): the drain's backlog estimate is this
-- minus the highest RowVersion it has received (see the PostgreSQL file for why not peek).
SELECT max(RowVersion) AS newest FROM {queue} WITH (READPAST);
