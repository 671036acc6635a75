"""spark-submit entry point, the scheduled job (drain, bodies, transform, publish):
``spark-submit jobs/run.py -c conf/postgres.example.yaml [--queue Q]... [--max-messages N] [--max-seconds S]``."""

import sys

from queuelake.jobs import run_job

if __name__ == "__main__":
    sys.exit(run_job("run", sys.argv[1:]))
