"""What the tests share, one module per concern; no test module imports another.

- ``cli``: the one CLI runner (``run_cli`` -> ``CliResult``: exit code, stdout, stderr, JSON summary) and
  the scheduled-job tests' ``cli``/``cli_logged``
- ``db``: a connection string per driver, one statement through psycopg, what ``install`` created
- ``transport``: transport configs (either driver), connections, queue refs, config files
- ``drain``: a drain's config and config file, queues installed and seeded, the journal, depths, claims
- ``kills``: the claim protocol's kill points, live traffic with a competitor, a killed drain's sessions
- ``edges``: values at the edges of their types; ``faults``: lake writes that fail
- ``bodies``, ``bodies_corpus``, ``typed_lake``: typed-body configs, the corpus, a lake with typed tables
- ``journal_rows``: journal rows through the lake port; ``small_lake``: a one-table delta-rs lake
- ``s3``: moto's S3 server and a lake on it; ``faulty_proxy``: a throttling proxy in front of it
- ``jvm``: the Delta JVM jars (and the skip without them); ``jvm_flags``: how the tests' JVMs start
- ``ports``: free ports for the servers the tests start; ``standalone``: a Spark standalone cluster
- ``redaction``: what redaction must make true of a message
- ``publish``: an outbound table, a publish config, the queues and subscriptions around it, the kill script
- ``schedule_system``, ``schedule_play``: months of a system and its operator on a schedule

A test's tier (tests/conftest.py) counts ``subprocess`` in a helper module it imports names from: ``cli``,
``s3``, ``standalone``, ``jvm_flags`` and ``schedule_play`` start processes.
"""
