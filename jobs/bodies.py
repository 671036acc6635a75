"""spark-submit entry point: ``spark-submit jobs/bodies.py -c conf/postgres.example.yaml``."""

import sys

from queuelake.jobs import run_job

if __name__ == "__main__":
    sys.exit(run_job("bodies", sys.argv[1:]))
