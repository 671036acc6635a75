"""queuelake: NServiceBus SQL transport queues <-> Delta lake, as scheduled Spark batch jobs."""

__version__ = "0.1.0"
