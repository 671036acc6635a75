"""spark-submit entry point: ``spark-submit jobs/drain.py -c conf/postgres.example.yaml [--queue Q]...``."""

import sys

from queuelake.jobs import run_job

if __name__ == "__main__":
    sys.exit(run_job("drain", sys.argv[1:]))
