-- Every distinct subscriber address (status lists each with its depth). Untrusted text: callers parse it.
SELECT DISTINCT queueaddress FROM {table};
