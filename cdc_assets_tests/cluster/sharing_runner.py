"""Two sessions of one Spark Connect server, each a run of its own: a long job in one, a small
job in the other once the long one runs. Run as a subprocess by :mod:`.test_spark_connect` (the
test process holds a classic session); prints one line ``RESULT <json>`` with the seconds from
the long job's start at which each job ended.
"""

from __future__ import annotations

import json
import sys
import threading
import time

RESULT_PREFIX = "RESULT "
LONG_TASKS = 60  # of TASK_MS each: 15 s on local[2] when the long job has the cores to itself
TASK_MS = 500
MARK = "cdc_assets.long_job"  # a JVM system property the long job's tasks set (local mode)


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    remote = argv[0]
    long_session = SparkSession.builder.remote(remote).create()
    small_session = SparkSession.builder.remote(remote).create()
    for session in (long_session, small_session):
        session.range(4).count()  # both attached and warm before the measurement
    ended: dict[str, float] = {}
    started = time.monotonic()

    def long_job() -> None:
        long_session.range(0, LONG_TASKS, 1, LONG_TASKS).selectExpr(
            f"reflect('java.lang.System', 'setProperty', '{MARK}', 'running') AS mark",
            f"reflect('java.lang.Thread', 'sleep', CAST({TASK_MS} AS BIGINT)) AS slept",
        ).collect()
        ended["long"] = time.monotonic() - started

    thread = threading.Thread(target=long_job)
    thread.start()
    # evaluated on the driver (a one-row local relation): no task of its own to wait for
    probe = f"SELECT reflect('java.lang.System', 'getProperty', '{MARK}') AS mark"
    while small_session.sql(probe).collect()[0]["mark"] != "running":
        time.sleep(0.1)
    small_session.range(0, 4, 1, 4).selectExpr("id * 2").collect()
    ended["small"] = time.monotonic() - started
    thread.join()
    print(RESULT_PREFIX + json.dumps(ended), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
