-- Record a published batch. Runs in the transaction of the batch's inserts: the ledger row and the
-- messages commit together or not at all. A second attempt at the same batch fails on the key.
INSERT INTO {table} (pipeline, output_table, batch_key, rows_sent, copies_sent)
VALUES (:pipeline, :output_table, :batch_key, :rows_sent, :copies_sent);
