"""The change logs, mirrors and histories by name: one view per Delta table in a Spark catalog.

A table is stored under a path (``<base>/mirror/demo/dbo/orders_mirror``) and in a stored form
(:mod:`.stored_columns`: names Delta refuses as ``_xHH_``, ``time`` as text). Spark SQL, dbt and
BI tools refer to tables by name and expect the source's columns, so each table gets a view::

    CREATE OR REPLACE VIEW spark_catalog.cdc_demo.dbo_order_lines_<hash>_mirror AS
      SELECT `order_id`, `line_x20_no` AS `line no`, ... FROM delta.`<path>`

whose columns are the source's names and types (a ``time`` cast back to ``TIME(p)``); a change
log's view leaves out the properties rows and their column (``_cdc_properties``). The view
reads the table's current version at every query, so it changes only when the table's columns
do: it is (re)created when a table is created or rebuilt from a snapshot (the only writes that
change columns), never by a range's write. Views of tables a source no longer has are dropped
(:func:`drop_views_except`). Time travel and the change data feed go by path
(``delta.`<path>` VERSION AS OF n``, ``table_changes_by_path``).

The catalog is the session's: under a Spark Connect server, the server's session catalog,
persistent in a Hive metastore (:func:`metastore_settings`; embedded Derby, so the server is
the one process that opens it) and shared by every run and by dbt; in a run with its own Spark
(local mode), that session's catalog (in memory unless the Spark settings point it at a
metastore service); or a catalog the Spark settings configure, by name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from . import delta_log
from .delta_location import is_local, local_path
from .partition_rows import PROPERTIES_COLUMN
from .spark_sql_names import sql_name, sql_string
from .stored_columns import STORED_NAME, STORED_TYPE

SESSION_CATALOG = "spark_catalog"
METASTORE_FOLDER = "_metastore"  # under a local storage base: the Connect server's metastore
STAGE_SUFFIXES = ("_changes", "_mirror", "_history")


@dataclass(frozen=True)
class TableName:
    catalog: str
    database: str
    table: str

    @property
    def database_sql(self) -> str:
        return f"{sql_name(self.catalog)}.{sql_name(self.database)}"

    @property
    def sql(self) -> str:
        return f"{self.database_sql}.{sql_name(self.table)}"

    def __str__(self) -> str:
        prefix = "" if self.catalog == SESSION_CATALOG else f"{self.catalog}."
        return f"{prefix}{self.database}.{self.table}"


def view_select(location: str, stored: T.StructType, *, change_log: bool) -> str:
    """The ``SELECT`` of a table's view: its stored columns under the source's names and
    types, from the Delta table at ``location`` (a change log's data rows only)."""
    columns = []
    for f in stored.fields:
        if change_log and f.name == PROPERTIES_COLUMN:
            continue
        meta = f.metadata or {}
        stored_type, name = meta.get(STORED_TYPE), meta.get(STORED_NAME)
        value = sql_name(f.name)
        if stored_type:
            value = f"CAST({value} AS {stored_type.upper()})"
        columns.append(f"{value} AS {sql_name(name or f.name)}" if stored_type or name else value)
    where = f" WHERE {sql_name(PROPERTIES_COLUMN)} IS NULL" if change_log else ""
    return f"SELECT {', '.join(columns)} FROM delta.{sql_name(location)}{where}"


_databases: set[tuple[int, str, str]] = set()  # (session, catalog, database) made by this process
_lock = threading.Lock()


def register_view(
    spark: SparkSession,
    name: TableName,
    location: str,
    *,
    change_log: bool = False,
    database_location: str | None = None,
    comment: str = "",
) -> None:
    """Create or replace the view ``name`` over the Delta table at ``location`` (one read of
    its schema and two catalog statements). ``database_location``: where a new database of the
    session catalog keeps its files (else the warehouse's). A local table gets its version
    checksum first (:func:`.delta_log.write_checksum`): Delta reads the schema from it, no
    Spark job (a small table synced in the driver runs none)."""
    if is_local(location):
        delta_log.write_checksum(local_path(location))
    stored = spark.read.format("delta").load(location).schema
    ensure_database(spark, name, database_location)
    text = f" COMMENT {sql_string(comment)}" if comment else ""
    spark.sql(
        f"CREATE OR REPLACE VIEW {name.sql}{text} AS "
        + view_select(location, stored, change_log=change_log)
    )


def ensure_database(spark: SparkSession, name: TableName, location: str | None) -> None:
    key = (id(spark), name.catalog, name.database)
    with _lock:
        if key in _databases:
            return
        where = (
            f" LOCATION {sql_string(location)}"
            if location is not None and name.catalog == SESSION_CATALOG
            else ""
        )
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {name.database_sql}{where}")
        _databases.add(key)


def drop_views_except(
    spark: SparkSession, catalog: str, database: str, keep: Iterable[str]
) -> list[str]:
    """Drop the views of ``catalog.database`` named as a stage's (``*_changes``, ``*_mirror``,
    ``*_history``) that are not in ``keep``: the tables a source no longer has. Other tables
    and views of the database are left alone. The names dropped."""
    wanted = {k.lower() for k in keep}
    database_sql = f"{sql_name(catalog)}.{sql_name(database)}"
    if not spark.catalog.databaseExists(f"{catalog}.{database}"):
        return []
    shown = spark.sql(f"SHOW VIEWS IN {database_sql}").collect()
    views = [r["viewName"] for r in shown if not r["isTemporary"]]
    gone = [v for v in views if v.lower() not in wanted and v.lower().endswith(STAGE_SUFFIXES)]
    for view in gone:
        spark.sql(f"DROP VIEW IF EXISTS {database_sql}.{sql_name(view)}")
    return gone


def metastore_folder(storage_path: str | None) -> Path | None:
    """Where a Spark Connect server keeps its persistent session catalog by default: beside the
    tables under a local storage base; None for an object store (no local disk to hold it)."""
    if not storage_path or not is_local(storage_path):
        return None
    return local_path(storage_path) / METASTORE_FOLDER


def metastore_settings(folder: Path) -> dict[str, str]:
    """Spark settings for a persistent session catalog in ``folder``: the Hive metastore (Hive
    2.3 and Derby, shipped in the pyspark wheel: nothing to download) in embedded Derby, which
    one process at a time may open, and the warehouse of managed tables (dbt's models)."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
        ),
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        # derby.log goes there, not into the working directory
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder}",
    }
