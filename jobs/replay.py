"""spark-submit entry point: ``spark-submit jobs/replay.py -c conf/postgres.example.yaml --where "..." [--to Q]``."""

import sys

from queuelake.jobs import run_job

if __name__ == "__main__":
    sys.exit(run_job("replay", sys.argv[1:]))
