"""``queuelake find``: one message or one conversation from the journal, in time order, without Spark."""
