DELETE FROM {table} WHERE endpoint = :endpoint AND topic = :topic;
