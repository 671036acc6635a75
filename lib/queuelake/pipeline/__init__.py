"""drain, transform, publish: each a plain function over config (+ Spark session where needed)."""
