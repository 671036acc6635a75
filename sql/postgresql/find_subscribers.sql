-- Distinct subscriber addresses of one topic (a .NET Type.FullName).
SELECT DISTINCT queueaddress FROM {table} WHERE topic = :topic;
