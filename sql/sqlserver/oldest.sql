SELECT TOP (1) Headers FROM {queue} WITH (READPAST) ORDER BY RowVersion;
