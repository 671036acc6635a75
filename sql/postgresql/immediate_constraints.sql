-- A batch's deferred constraints (a DEFERRABLE INITIALLY DEFERRED foreign key, a deferred constraint
-- trigger) checked at each insert instead of at COMMIT: a table that refuses its rows then fails the
-- insert into it, which names the table, and the send goes on without it, where a refusal at COMMIT
-- could name none and failed the whole batch. For this transaction only.
SET CONSTRAINTS ALL IMMEDIATE;
