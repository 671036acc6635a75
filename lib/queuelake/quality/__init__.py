"""Data quality between the lake and the queues: the built-in outbound contract (Spark row checks,
``outbound.py``) and the user's own great-expectations suites per output (``expectations.py``)."""
