-- Store a delayed message due at an instant (publish's deliver_at): :due is the UTC time as text
-- (yyyy-mm-dd hh:mi:ss.ffffff, style 121). Due is datetime, which holds 1/300 s: the conversion rounds
-- to the nearest .000, .003 or .007 s, at most 1.67 ms off (9999-12-31 23:59:59.997, the last instant
-- publish accepts, is exact). GETUTCDATE() plus a delay was later by the time between the batch's clock
-- read and this statement, and rounded twice.
INSERT INTO {queue} (Headers, Body, Due)
VALUES (:headers, :body, CAST(CONVERT(datetime2(7), :due, 121) AS datetime));
