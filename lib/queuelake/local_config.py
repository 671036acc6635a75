"""The local embedded config the package ships: what ``-c`` falls back to when ``conf/local.yaml``
is not in the current folder (a wheel has no ``conf/``), and what ``queuelake demo`` writes out.

A module rather than a data file so that it ships in every wheel without package-data rules.
Relative paths are relative to the current folder, like those of ``conf/local.yaml``: a throwaway
PostgreSQL in ``./.queuelake/pgdata`` and the lake in ``./lake``. It drains Sales, audit and error;
Billing and Shipping are the endpoints the worked example publishes and sends to, so they are not
drained (see ``drain.also_destinations`` in the README).
"""

from __future__ import annotations

SOURCE = "queuelake.local_config (built in)"

LOCAL_YAML = """\
# The embedded default: a throwaway PostgreSQL (data in ./.queuelake/pgdata), local Spark, ./lake.
transport:
  dialect: postgresql
  driver: psycopg
  connection: null
  embedded: ./.queuelake/pgdata
  delayed_endpoints: [Sales, Billing, Shipping]
lake:
  root: ./lake
  engine: auto
spark:
  master: local[2]
drain:
  queues: [Sales, audit, error]
  batch_size: 10000
  workers_per_queue: 2
transforms:
  - name: customer_totals
    function: queuelake.commands.demo.orders:customer_totals
    output: outbound_customer_totals
    destinations: [Billing]
publish:
  endpoint: Lakehouse
  outputs: [outbound_customer_totals]
  batch_size: 5000
"""
