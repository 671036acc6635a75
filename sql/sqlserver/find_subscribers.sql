SELECT DISTINCT QueueAddress FROM {table} WHERE Topic = :topic;
