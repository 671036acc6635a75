"""Publish outbound tables to queues and subscribers, exactly once.

Per output table, a *round* covers the rows its commits added in Delta versions (P, V]. The round's
rows are read in a fixed order (files sorted by path, rows in file order) and cut into batches of
``publish.batch_size``; batch k's inserts into every destination and its ledger row
``P-V:k/N@B`` commit in one DB transaction. A rerun (after a crash at any instant) finds the round in
the ledger and skips the batches already there, so each row reaches each destination exactly once.
Message ids are uuid5(pipeline, key, destination): the same copy always has the same MessageId.

Destinations come from outbound rows and from SubscriptionRouting, which every endpoint writes and
queuelake does not own. Each is parsed and checked (a queue table with the transport's columns)
before a batch is sent; a copy whose destination cannot be delivered is not sent but recorded in
``<output>_undeliverable`` with its reason (idempotently, before the batch's DB commit), so one bad
row never blocks delivery to everyone else.

The modules, top down:
- ``run``: the command: per output, the round, its validation, the sender; the summary, ``runs`` rows
- ``validate``: the outbound contract (rejects) and the user's expectations, before anything is sent
- ``driver``: a round sent from the driver, batch by batch
- ``executors``: a large round sent from Spark tasks, one per Parquet row group
- ``rounds``: rounds and their batch keys in the ledger: which round to send, which batches are done
- ``rows``: which rows of a round are sent, in the round's fixed order, in batches
- ``routing``: destinations checked, fan-out to subscribers, the messages of a batch
- ``undeliverable``: the copies not sent, recorded with their reason
- ``result``: one output's result
"""
