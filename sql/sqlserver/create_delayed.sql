-- Delayed-delivery store of an endpoint (<endpoint>.Delayed).
EXEC sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
IF NOT EXISTS (SELECT * FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U')
BEGIN
    CREATE TABLE {queue} (
        Headers nvarchar(max) NOT NULL,
        Body varbinary(max) NULL,
        Due datetime NOT NULL,
        RowVersion bigint IDENTITY(1, 1) NOT NULL
    );
    CREATE NONCLUSTERED INDEX [Index_Due] ON {queue} ([Due]);
END;
