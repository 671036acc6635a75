"""Everything queuelake does to a queue database: addresses, header codec, dialect SQL, drivers."""
