"""The project's configuration: one YAML file, validated by pydantic.

``cdc_assets.yaml`` at the project root by default, or the file ``CDC_ASSETS_CONFIG`` names::

    sources:
      - name: demo                       # [a-z][a-z0-9_]*, part of asset keys and job names
        connection:                      # exactly one of emulator / odbc / dsn
          emulator: {path: .demo/source.db}
          # odbc: {server: sql1, database: shop, user: cdc_reader, password_env: SHOP_PASSWORD}
          # dsn: {connection_string_env: CDC_TEST_SQLSERVER_DSN}
        tables: {include: ["*"], exclude: ["dbo.audit_*"]}   # "schema.table" glob patterns
        sync: {sensor_interval_seconds: 5, min_range_interval_seconds: 0,
               max_transactions_per_range: 10000, on_gap: resnapshot,   # or fail
               overdue_after_minutes: 15,    # mirrors' freshness policy (default: derived)
               retain_ranges: 1d,   # ranges kept: a duration (30m, 12h, 7d) or a count
               tables_in_parallel: 4}   # tables a run works on at the same time
        snapshot: {mode: auto, chunk_rows: 250000,           # auto | exact | fuzzy
                   chunks_per_commit: 0}   # key ranges per commit (0: Spark's parallelism)
        maintenance: {cron: "0 * * * *", keep_history: 7d,  # VACUUM, Delta log retention
                      drop_retired_changes: false,          # delete retired ranges' rows
                      keep_runs: 30d}                       # finished runs kept; null: all
        history: {include: ["dbo.*"]}        # SCD2 history assets (see history_config.py)
        owners: ["team:data-platform"]       # shown on every asset of the source
        columns: {hash_key_env: PII_HASH_KEY,  # column rules: exclude | hash | redact | null
                  rules: [{tables: "dbo.customers", columns: [email], rule: hash}]}
    storage: {base_path: .demo/storage}
    spark: {master: "local[2]", conf: {}}     # or remote: sc://127.0.0.1:15002 (Spark Connect)
    examples: [daily_orders]                 # the demo's downstream asset (needs dbo.orders)

Relative paths are relative to the file. A bad file raises :class:`ConfigError` with one line
naming every wrong setting — a source by its name, the setting's dotted path, what is wrong and
the value given (never for a password or connection string, nor for an unknown key), and for an
unknown key the closest known one ("did you mean ...").
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cdc_assets.column_rules import ColumnRules
from cdc_assets.config_errors import describe
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.history_config import HistoryConfig
from cdc_assets.spark_connect_address import spark_connect_address
from cdc_assets.sqlserver.connection import DsnSettings, OdbcSettings

# Dagster's owner formats: an e-mail address or a team.
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_TEAM = re.compile(r"^team:[A-Za-z0-9_-]+$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CRON = re.compile(r"^[\w*/,?-]+(\s+[\w*/,?-]+){4}$")

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "ConfigError",
    "ConnectionConfig",
    "DsnConfig",
    "ProjectConfig",
    "SnapshotPolicy",
    "SourceComponentConfig",
    "SourceConfig",
    "SparkConfig",
    "StorageConfig",
    "SyncPolicy",
    "TableSelection",
    "load_config",
    "parse_config",
    "parse_source_component",
]

CONFIG_ENV = "CDC_ASSETS_CONFIG"
DEFAULT_CONFIG_FILE = "cdc_assets.yaml"


class ConfigError(ValueError):
    """The configuration is unusable; the one-line message says where, why and what to do."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DsnConfig(_Model):
    """A whole ODBC connection string read from an environment variable (it holds the password)."""

    connection_string_env: str = Field(
        description="Name of the environment variable holding the ODBC connection string."
    )
    login_timeout: int = Field(default=15, ge=1, le=600)

    def settings(self) -> DsnSettings:
        value = os.environ.get(self.connection_string_env)
        if not value:
            raise ConfigError(
                f"connection.dsn: the environment variable {self.connection_string_env} is not "
                "set; export it with the ODBC connection string of the source."
            )
        return DsnSettings(connection_string=value, login_timeout=self.login_timeout)


class ConnectionConfig(_Model):
    """Where the source is: exactly one of ``emulator``, ``odbc`` or ``dsn``."""

    emulator: EmulatorSettings | None = None
    odbc: OdbcSettings | None = None
    dsn: DsnConfig | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ConnectionConfig:
        given = [n for n in ("emulator", "odbc", "dsn") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'emulator' (a path), 'odbc' (server, database, user, "
                f"password_env) or 'dsn' (connection_string_env); got {given or 'none'}"
            )
        if self.odbc is not None and self.odbc.password is not None:
            raise ValueError(
                "odbc.password must not be written in the file: put the password in an "
                "environment variable and give its name as odbc.password_env"
            )
        return self

    def settings(self) -> OdbcSettings | EmulatorSettings | DsnSettings:
        if self.emulator is not None:
            return self.emulator
        if self.odbc is not None:
            return self.odbc
        assert self.dsn is not None
        return self.dsn.settings()


class TableSelection(_Model):
    """Which captured tables become assets: ``schema.table`` glob patterns, case-insensitive."""

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()

    def matches(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}".lower()

        def hit(patterns: tuple[str, ...]) -> bool:
            return any(fnmatch.fnmatchcase(name, p.lower()) for p in patterns)

        return hit(self.include) and not hit(self.exclude)

    def unmatched(self, names: list[tuple[str, str]]) -> list[str]:
        """The include patterns written by the user (not the default ``*``) that match none of
        ``names`` (``(schema, table)``): usually a typo, or a table CDC is not enabled on."""
        lowered = [f"{schema}.{table}".lower() for schema, table in names]
        return [
            p
            for p in self.include
            if p != "*" and not any(fnmatch.fnmatchcase(n, p.lower()) for n in lowered)
        ]


class SyncPolicy(_Model):
    """How the sync sensor cuts the log into ranges."""

    sensor_interval_seconds: int = Field(default=5, ge=1, le=3600)
    min_range_interval_seconds: float = Field(
        default=0, ge=0, description="Wait at least this long after a range before the next."
    )
    max_transactions_per_range: int = Field(default=10_000, ge=1)
    tables_in_parallel: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Tables a run reads, writes and merges at the same time (driver threads "
        "submitting Spark jobs side by side); 1 works on one table after another.",
    )
    on_gap: Literal["resnapshot", "fail"] = Field(
        default="resnapshot",
        description="When cleanup removed changes the chain still needs: re-snapshot the "
        "table and rebuild its mirror, or stop and wait for a person.",
    )
    max_retry_pause: str = Field(
        default="30m",
        description="A table that fails on its own (its snapshot, range or mirror) is retried "
        "after a pause that doubles with each failure in a row, from about 30 s up to this "
        "(a duration: 90s, 30m, 2h); the source's other tables keep syncing meanwhile.",
    )
    overdue_after_minutes: float | None = Field(
        default=None,
        gt=0,
        description="A mirror not updated for this long is overdue in the UI (its freshness "
        "policy); warned at a third of it. Default: derived from the sensor interval.",
    )

    retain_ranges: int | str = Field(
        default="1d",
        description="Range partitions every mirror and history has applied are deleted from "
        "Dagster once older than this (a duration: 90s, 30m, 12h, 7d) or beyond this many "
        "newest ranges (a count); their rows stay in the change-log tables.",
    )

    @field_validator("retain_ranges")
    @classmethod
    def _retention(cls, value: int | str) -> int | str:
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            count = int(value)
            if count < 1:
                raise ValueError("keep at least 1 range (a count), or give a duration like 1d")
            return count
        if not _DURATION.match(value.strip()):
            raise ValueError(
                "give a duration as a number and a unit s, m, h or d (90s, 30m, 12h, 1d), or a "
                "count of ranges to keep (500)"
            )
        return value.strip()

    @field_validator("max_retry_pause")
    @classmethod
    def _max_pause(cls, value: str) -> str:
        return _duration(value)

    def retention(self) -> tuple[int | None, float | None]:
        """(ranges to keep, seconds to keep them): exactly one of the two is set."""
        if isinstance(self.retain_ranges, int):
            return self.retain_ranges, None
        return None, duration_seconds(self.retain_ranges)

    def freshness_windows(self) -> tuple[float, float]:
        """(warn, fail) seconds of the mirrors' freshness policy: a mirror moves every range, a
        range follows every ``sensor_interval + min_range_interval`` while the log moves, so
        the default fails after 30 such cycles (15 minutes at least) and warns at a third."""
        if self.overdue_after_minutes is not None:
            fail = self.overdue_after_minutes * 60
        else:
            fail = max(900.0, 30 * (self.sensor_interval_seconds + self.min_range_interval_seconds))
        return fail / 3, fail


class SnapshotPolicy(_Model):
    """How the initial rows of a table are read."""

    mode: Literal["auto", "exact", "fuzzy"] = Field(
        default="auto", description="exact needs ALLOW_SNAPSHOT_ISOLATION ON; auto picks it if so."
    )
    chunk_rows: int = Field(
        default=250_000, ge=1, description="Rows per key range read by one Spark task."
    )
    chunks_per_commit: int = Field(
        default=0,
        ge=0,
        description="Key ranges read together and committed in one Delta commit: a snapshot "
        "killed half way resumes after its last commit. 0: as many as Spark runs at once.",
    )


def duration_seconds(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``7d`` in seconds (text already validated)."""
    match = _DURATION.match(text.strip())
    assert match is not None
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _duration(value: str, *, at_least: float = 0, what: str = "") -> str:
    if not _DURATION.match(value.strip()):
        raise ValueError("give a duration as a number and a unit s, m, h or d (90s, 30m, 12h, 7d)")
    if duration_seconds(value) < at_least:
        raise ValueError(what)
    return value.strip()


MIN_HISTORY_SECONDS = 600  # a range run or a snapshot must not outlive the files it reads


class MaintenancePolicy(_Model):
    """Keeps the source's storage and run history bounded: a job on a schedule."""

    cron: str = Field(
        default="0 * * * *",
        description="When the source's maintenance job runs (cron, the instance's time zone).",
    )
    keep_history: str = Field(
        default="7d",
        description="How far back every Delta table (change logs, mirrors) keeps its earlier "
        "versions: VACUUM deletes older files, the log drops older commits; time travel and "
        "the change data feed reach back this far.",
    )
    drop_retired_changes: bool = Field(
        default=False,
        description="Delete the change-log rows of range partitions retired from Dagster "
        "(sync.retain_ranges). Off: the change logs keep every change since the snapshot.",
    )
    keep_runs: str | None = Field(
        default="30d",
        description="Delete finished runs of the source's jobs (with their events and logs) "
        "once older than this, keeping those that hold a partition or a check result still "
        "shown; null keeps every run.",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not _CRON.match(value.strip()):
            raise ValueError("give a cron expression of five fields, like '0 * * * *'")
        return value

    @field_validator("keep_history")
    @classmethod
    def _history(cls, value: str) -> str:
        return _duration(
            value,
            at_least=MIN_HISTORY_SECONDS,
            what="keep at least 10m of history: a run must not outlive the files it reads",
        )

    @field_validator("keep_runs")
    @classmethod
    def _runs(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value)


class CatalogConfig(_Model):
    """Where a source's change logs, mirrors and histories are registered by name (Spark SQL,
    dbt): ``<name>.<database>.<schema>_<table>_{changes,mirror,history}``."""

    enabled: bool = Field(
        default=True, description="Register the tables by name (false: by path only)."
    )
    name: str = Field(
        default="spark_catalog",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The Spark catalog: spark_catalog (the session catalog, persistent under a "
        "Spark Connect server) or one the Spark settings configure (spark.sql.catalog.<name>).",
    )
    database: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="The database (namespace) of the source's tables; default cdc_<source>.",
    )


class SourceConfig(_Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    connection: ConnectionConfig
    tables: TableSelection = TableSelection()
    sync: SyncPolicy = SyncPolicy()
    snapshot: SnapshotPolicy = SnapshotPolicy()
    maintenance: MaintenancePolicy = MaintenancePolicy()
    columns: ColumnRules = Field(
        default=ColumnRules(),
        description="Columns never read (exclude) or masked as read (hash, redact, null): "
        "see cdc_assets/column_rules.py.",
    )
    history: HistoryConfig = HistoryConfig()  # tables with a history asset (SCD type 2)
    catalog: CatalogConfig = CatalogConfig()  # the tables by name (spark/table_names.py)
    owners: tuple[str, ...] = Field(
        default=(),
        description="Shown as the owners of every asset of the source: e-mail addresses or "
        "'team:<name>'.",
    )

    @field_validator("owners")
    @classmethod
    def _owner_format(cls, owners: tuple[str, ...]) -> tuple[str, ...]:
        for owner in owners:
            if not (_EMAIL.match(owner) or _TEAM.match(owner)):
                raise ValueError(
                    f"owner {owner!r} is neither an e-mail address nor 'team:<name>' "
                    "(letters, digits, _ and -)"
                )
        return owners

    def connection_settings(self) -> OdbcSettings | EmulatorSettings | DsnSettings:
        return self.connection.settings()


class StorageConfig(_Model):
    base_path: str = Field(
        min_length=1,
        description="Where every asset's Delta table is stored: a directory, or a Hadoop "
        "file-system URI (file://, s3a://bucket/prefix, abfss://...; credentials from the "
        "environment, never this file).",
    )


class SparkConfig(_Model):
    master: str = Field(default="local[*]", min_length=1)
    remote: str | None = Field(
        default=None,
        description="A Spark Connect server (sc://host:port): runs attach to a warm Spark "
        "instead of starting one; master is then the server's business.",
    )
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and spark_connect_address(value) is None:
            raise ValueError(
                "a Spark Connect URL is sc://host:port (e.g. sc://127.0.0.1:15002); leave "
                "remote out to start Spark in the run with master"
            )
        return value


class ProjectConfig(_Model):
    # Not Field(min_length=1): pydantic checks that length against the items that validated,
    # so one bad source would also be reported as "sources: at least 1 item ..., not 0".
    sources: tuple[SourceConfig, ...]
    storage: StorageConfig
    spark: SparkConfig = SparkConfig()
    examples: tuple[Literal["daily_orders", "dbt"], ...] = Field(
        default=(),
        description="Example assets built on the mirrors (the demo's): daily_orders, a daily "
        "aggregate of dbo.orders written with Spark; dbt, a dbt project's models on the "
        "mirrors of orders, order lines and customers (needs spark.remote).",
    )

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: tuple[SourceConfig, ...]) -> tuple[SourceConfig, ...]:
        if not sources:
            raise ValueError("configure at least one source")
        names = [s.name for s in sources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"source names must be unique; repeated: {', '.join(duplicates)}")
        return sources

    def source(self, name: str) -> SourceConfig:
        for source in self.sources:
            if source.name == name:
                return source
        raise ConfigError(
            f"no source named {name!r}; configured: {', '.join(s.name for s in self.sources)}"
        )


class SourceComponentConfig(SourceConfig):
    """The attributes of one ``cdc_assets.SqlServerCdcSource`` component (a ``defs.yaml``): one
    source's settings as in ``sources:`` of ``cdc_assets.yaml``, and where its assets are stored
    and computed. Every source of one Dagster project gives the same ``storage`` and ``spark``
    (they become the project's shared ``pyspark`` and IO manager resources)."""

    storage: StorageConfig = Field(description="Where the source's Delta tables are stored.")
    spark: SparkConfig = Field(
        default=SparkConfig(), description="The Spark the runs read, write and merge with."
    )
    examples: tuple[Literal["daily_orders", "dbt"], ...] = Field(
        default=(),
        description="Example assets built on this source's mirrors (the demo's): daily_orders, "
        "a daily aggregate of dbo.orders written with Spark; dbt, a dbt project's models on "
        "the mirrors of orders, order lines and customers (needs spark.remote).",
    )

    def project(self) -> ProjectConfig:
        """This source alone as a project configuration (what the definitions are built from)."""
        source = SourceConfig(**{name: getattr(self, name) for name in SourceConfig.model_fields})
        return ProjectConfig(
            sources=(source,), storage=self.storage, spark=self.spark, examples=self.examples
        )


def _resolve_paths(data: Any, base_dir: Path) -> Any:
    """Relative ``emulator.path`` and ``storage.base_path`` become relative to ``base_dir``."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    storage = data.get("storage")
    if (
        isinstance(storage, dict)
        and isinstance(storage.get("base_path"), str)
        and "://" not in storage["base_path"]
    ):
        storage = dict(storage, base_path=str(base_dir / Path(storage["base_path"]).expanduser()))
        data["storage"] = storage
    sources = data.get("sources")
    if isinstance(sources, list):
        resolved = []
        for source in sources:
            emulator = (source.get("connection") or {}) if isinstance(source, dict) else {}
            settings = emulator.get("emulator") if isinstance(emulator, dict) else None
            if isinstance(settings, dict) and isinstance(settings.get("path"), str):
                path = str(base_dir / Path(settings["path"]).expanduser())
                connection = dict(emulator, emulator=dict(settings, path=path))
                source = dict(source, connection=connection)
            resolved.append(source)
        data["sources"] = resolved
    return data


def parse_config(data: Any, *, base_dir: Path, origin: str) -> ProjectConfig:
    """Validate ``data`` (the parsed YAML); ``origin`` names it in the error message."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{origin}: expected a mapping with 'sources' and 'storage' at the top level"
        )
    problems = ""
    try:
        return ProjectConfig.model_validate(_resolve_paths(data, base_dir))
    except ValidationError as exc:
        problems = "; ".join(
            describe(e, data, root=ProjectConfig) for e in exc.errors(include_url=False)
        )
    # Raised outside the except block: the ValidationError (whose text shows the input values,
    # a password among them) must not ride along as the suppressed __context__.
    raise ConfigError(f"{origin} is not a valid cdc_assets configuration: {problems}")


def parse_source_component(data: Any, *, base_dir: Path, origin: str) -> ProjectConfig:
    """Validate a component's attributes (one source, :class:`SourceComponentConfig`) with the
    same rules and the same one-line messages as :func:`parse_config`; relative paths are
    relative to ``base_dir`` (the project's root)."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{origin}: attributes must be a mapping with 'name', 'connection' and 'storage'"
        )
    shaped = _resolve_paths({"sources": [data], "storage": data.get("storage")}, base_dir)
    resolved = dict(shaped["sources"][0])
    if "storage" in data:
        resolved["storage"] = shaped["storage"]
    name = data.get("name")
    source = name if isinstance(name, str) and name else "(no name)"
    problems = ""
    try:
        return SourceComponentConfig.model_validate(resolved).project()
    except ValidationError as exc:
        problems = "; ".join(
            describe(e, data, root=SourceComponentConfig, source=source)
            for e in exc.errors(include_url=False)
        )
    # Raised outside the except block (see parse_config): no input values ride along.
    raise ConfigError(f"{origin} is not a valid cdc_assets configuration: {problems}")


def config_path(path: str | Path | None = None) -> Path:
    """``path``, else ``$CDC_ASSETS_CONFIG``, else ``./cdc_assets.yaml``."""
    chosen = path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_FILE
    return Path(chosen).expanduser().resolve()


def load_config(path: str | Path | None = None) -> ProjectConfig:
    """Read and validate the configuration file (see :func:`config_path`)."""
    file = config_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"configuration file {file} does not exist: create it (see README, 'Configuration') "
            f"or point {CONFIG_ENV} at yours"
        ) from None
    except OSError as exc:
        raise ConfigError(f"configuration file {file} cannot be read: {exc.strerror}") from None
    syntax_error = ""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        syntax_error = f"{file} is not valid YAML{where}: {problem}"
    if syntax_error:  # outside the except block: the YAMLError quotes the file's text
        raise ConfigError(syntax_error)
    return parse_config(data, base_dir=file.parent, origin=str(file))
