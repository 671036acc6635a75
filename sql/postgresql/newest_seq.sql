-- The newest row's seq (no row when the queue is empty). For the drain's progress line: the backlog
-- is estimated as this minus the highest seq the drain has received.
-- Written as ORDER BY ... LIMIT 1, one probe of the seq index's tail, which stays live while a drain
-- deletes from the head. Not max(seq): once a table was emptied, analysed and refilled (statistics
-- say "empty"), the planner aggregates over a scan of the whole index instead, visiting every dead
-- and live entry (tests/transport/test_receive_churn.py checks the plan).
SELECT seq AS newest FROM {queue} WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1;
