-- Queue table of the NServiceBus SQL Server transport: a heap with a nonclustered RowVersion index
-- and a filtered Expires index. sp_getapplock serialises racing installers, as the transport does.
EXEC sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
IF NOT EXISTS (SELECT * FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U')
BEGIN
    CREATE TABLE {queue} (
        Id uniqueidentifier NOT NULL,
        CorrelationId varchar(255) NULL,
        ReplyToAddress varchar(255) NULL,
        Recoverable bit NOT NULL,
        Expires datetime NULL,
        Headers nvarchar(max) NOT NULL,
        Body varbinary(max) NULL,
        RowVersion bigint IDENTITY(1, 1) NOT NULL
    );
    CREATE NONCLUSTERED INDEX [Index_RowVersion] ON {queue} ([RowVersion] ASC);
    CREATE NONCLUSTERED INDEX [Index_Expires] ON {queue} ([Expires]) INCLUDE ([Id], [RowVersion]) WHERE [Expires] IS NOT NULL;
END;
