"""The delta-spark engine (``engine.DeltaSparkEngine``): Delta through the JVM, and the Python data source
the Spark stages write and read the journal through."""
