"""Everything queuelake does to a queue database: addresses, dialect SQL, drivers, queues and subscriptions."""
