-- Example SQL transform: one "EndpointActivity" event per originating endpoint and message type seen
-- in the new increment of the journal (the view new_messages holds landed rows only).
-- Output columns follow the outbound contract; the key hashes the input ids, so a rerun over the
-- same increment produces the same keys and publish the same message ids.
SELECT
    concat_ws(':', 'activity', originating_endpoint, message_type,
              sha2(concat_ws(',', sort_array(collect_list(message_id))), 256)) AS key,
    'Lakehouse.Events.EndpointActivity, Lakehouse.Events' AS message_type,
    'Publish' AS intent,
    CAST(NULL AS STRING) AS destination,
    encode(to_json(named_struct(
        'Endpoint', originating_endpoint,
        'MessageType', message_type,
        'Messages', count(*),
        'FirstSent', date_format(min(time_sent), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"),
        'LastSent', date_format(max(time_sent), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
    )), 'UTF-8') AS body
FROM new_messages
WHERE originating_endpoint IS NOT NULL AND message_type IS NOT NULL
GROUP BY originating_endpoint, message_type
