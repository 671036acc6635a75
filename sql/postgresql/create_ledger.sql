-- queuelake's publish ledger: one row per published batch, written in the same transaction as the
-- batch's inserts, so a batch that is in the ledger has reached every destination exactly once.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
CREATE TABLE IF NOT EXISTS {table} (
    pipeline varchar(200) NOT NULL,
    output_table varchar(200) NOT NULL,
    batch_key varchar(200) NOT NULL,
    rows_sent bigint NOT NULL,
    copies_sent bigint NOT NULL,
    published_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    PRIMARY KEY (pipeline, output_table, batch_key)
);
