-- Before a part of a table's copies is probed inside a batch's transaction (``queues.probe``): sent,
-- then rolled back to here whether the table took it or not, halved where refused until the refused
-- copies are found; the others are then sent together, so one bad row does not take its table out of
-- the run.
SAVEPOINT queuelake_rows;
