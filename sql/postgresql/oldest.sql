-- Headers of the oldest row: status reads its TimeSent to report the oldest message's age.
SELECT headers FROM {queue} ORDER BY seq LIMIT 1;
