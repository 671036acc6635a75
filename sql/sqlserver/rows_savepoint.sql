-- Before a part of a table's copies is probed inside a batch's transaction (``queues.probe``).
SAVE TRANSACTION queuelake_rows;
