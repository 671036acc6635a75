"""Data-quality gates (great-expectations) between the lake and the queues."""
