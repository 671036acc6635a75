-- queuelake's publish ledger: one row per published batch, committed with the batch's inserts.
EXEC sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
IF NOT EXISTS (SELECT * FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U')
BEGIN
    CREATE TABLE {table} (
        pipeline nvarchar(200) NOT NULL,
        output_table nvarchar(200) NOT NULL,
        batch_key nvarchar(200) NOT NULL,
        rows_sent bigint NOT NULL,
        copies_sent bigint NOT NULL,
        published_at datetime2 NOT NULL DEFAULT SYSUTCDATETIME(),
        PRIMARY KEY (pipeline, output_table, batch_key)
    );
END;
