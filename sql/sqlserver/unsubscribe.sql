DELETE FROM {table} WHERE Endpoint = :endpoint AND Topic = :topic;
