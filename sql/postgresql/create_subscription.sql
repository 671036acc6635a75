-- Subscription routing table shared by all endpoints using native publish/subscribe.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
CREATE TABLE IF NOT EXISTS {table} (
    queueaddress varchar(200) NOT NULL,
    endpoint varchar(200) NOT NULL,
    topic varchar(200) NOT NULL,
    PRIMARY KEY (endpoint, topic)
);
