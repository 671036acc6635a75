-- queuelake's drain claims: one row per drained batch whose rows have left the queue and whose
-- Parquet files are staged in the journal's folder but maybe not yet committed to the Delta log.
-- Inserted in the same transaction as the batch's DELETE, cleared once the Delta commit landed; a
-- row still here after a crash tells the next drain which staged files to commit.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
CREATE TABLE IF NOT EXISTS {table} (
    app_id text NOT NULL,
    version bigint NOT NULL,
    queue text NOT NULL,
    lake_table varchar(200) NOT NULL,
    row_count bigint NOT NULL,
    staged text NOT NULL,
    claimed_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    PRIMARY KEY (app_id, version)
);
