"""``queuelake where``: every place a message, a conversation or a business key's messages are or were."""
