-- The columns of a table (lower-case names), to tell a queue table from any other table before
-- sending to it: an address read from SubscriptionRouting may name anything.
SELECT LOWER(name) FROM {catalog_prefix}sys.columns WHERE object_id = OBJECT_ID(:qualified_name);
