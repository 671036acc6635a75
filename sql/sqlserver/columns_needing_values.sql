-- The columns of a table an INSERT must fill (lower-case names): NOT NULL, no default, not an identity,
-- computed, rowversion or GENERATED ALWAYS column (a temporal table's period, a ledger table's hidden
-- columns). One the send does not write makes every copy to the table fail. None when the table has an
-- INSTEAD OF INSERT trigger, which may fill it: the send decides there.
SELECT LOWER(c.name) FROM {catalog_prefix}sys.columns AS c
WHERE c.object_id = OBJECT_ID(:qualified_name)
  AND c.is_nullable = 0 AND c.is_identity = 0 AND c.is_computed = 0 AND c.default_object_id = 0
  AND c.generated_always_type = 0
  AND TYPE_NAME(c.system_type_id) <> 'timestamp'
  AND NOT EXISTS (
    SELECT 1 FROM {catalog_prefix}sys.triggers AS tr
    JOIN {catalog_prefix}sys.trigger_events AS te ON te.object_id = tr.object_id
    WHERE tr.parent_id = c.object_id AND tr.is_instead_of_trigger = 1 AND tr.is_disabled = 0 AND te.type = 1
  );
