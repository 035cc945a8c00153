"""Whether code ran Spark jobs: the newest job id of a driver, read before and after it."""

from __future__ import annotations

from pyspark.sql import SparkSession


def newest_job(spark: SparkSession) -> int:
    """The id of the newest Spark job of this driver (-1 before any)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])
