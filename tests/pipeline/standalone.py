"""Moved to ``tests.helpers.standalone``; this name stays while ``bench/queues.py`` imports it from here."""

from tests.helpers.standalone import Cluster, standalone_cluster

__all__ = ["Cluster", "standalone_cluster"]
