-- queuelake's drain claims: one row per drained batch whose rows have left the queue and whose
-- Parquet files are staged in the journal's folder but maybe not yet committed to the Delta log.
-- Inserted in the same transaction as the batch's DELETE, cleared once the Delta commit landed.
EXEC sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
IF NOT EXISTS (SELECT * FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U')
BEGIN
    CREATE TABLE {table} (
        app_id nvarchar(450) NOT NULL,
        version bigint NOT NULL,
        queue nvarchar(max) NOT NULL,
        lake_table nvarchar(200) NOT NULL,
        row_count bigint NOT NULL,
        staged nvarchar(max) NOT NULL,
        claimed_at datetime2 NOT NULL DEFAULT SYSUTCDATETIME(),
        PRIMARY KEY (app_id, version)
    );
END;
