-- Subscription routing table shared by all endpoints using native publish/subscribe.
EXEC sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction';
IF NOT EXISTS (SELECT * FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U')
BEGIN
    CREATE TABLE {table} (
        QueueAddress nvarchar(200) NOT NULL,
        Endpoint nvarchar(200) NOT NULL,
        Topic nvarchar(200) NOT NULL,
        CONSTRAINT [PK_SubscriptionRouting] PRIMARY KEY CLUSTERED (Endpoint, Topic)
    );
END;
