-- Subscribe is an upsert: an endpoint re-subscribing from a new address moves its subscription.
INSERT INTO {table} (queueaddress, endpoint, topic)
VALUES (:queue_address, :endpoint, :topic)
ON CONFLICT (endpoint, topic) DO UPDATE SET queueaddress = EXCLUDED.queueaddress;
