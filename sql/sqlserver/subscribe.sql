-- Subscribe is an upsert keyed by (Endpoint, Topic).
MERGE {table} WITH (HOLDLOCK, TABLOCK) AS target
USING (SELECT :queue_address AS QueueAddress, :endpoint AS Endpoint, :topic AS Topic) AS source
ON target.Endpoint = source.Endpoint AND target.Topic = source.Topic
WHEN MATCHED THEN UPDATE SET QueueAddress = source.QueueAddress
WHEN NOT MATCHED THEN INSERT (QueueAddress, Topic, Endpoint) VALUES (source.QueueAddress, source.Topic, source.Endpoint);
