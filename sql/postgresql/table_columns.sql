-- The columns of a table (lower-case names), to tell a queue table from any other table before
-- sending to it: an address read from SubscriptionRouting may name anything.
SELECT lower(column_name) FROM information_schema.columns WHERE table_schema = :schema AND table_name = :table;
