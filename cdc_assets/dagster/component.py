"""``cdc_assets.SqlServerCdcSource``: one SQL Server source as a Dagster Component.

A ``defs.yaml`` per source (``dg scaffold defs cdc_assets.SqlServerCdcSource <path>`` writes a
commented one); its ``attributes`` are the source's settings (:class:`~cdc_assets.config.
SourceComponentConfig`: the keys of one entry of ``sources:`` in ``cdc_assets.yaml``, plus
``storage`` and ``spark``), validated by the project's own model, so ``dagster dev``, ``dg check
defs`` and ``dg list defs`` name a wrong setting in the same one line as ``cdc-assets check``.

The definitions are built from the source's **recorded catalog** (its captured tables, capture
instances, columns, types and keys: :mod:`cdc_assets.sqlserver.recorded_catalog`), kept as the
component's Dagster defs state (by default a file under the project's ``defs/.local_defs_state``;
``defs_state: {management_type: VERSIONED_STATE_STORAGE}`` keeps it in the instance's
``defs_state_storage``):

- at each load of the code location the source is asked for its catalog; when it answers, the
  catalog is recorded anew (new tables, new capture instances show after a reload, as before);
- when it does not answer, its assets, checks, job and sensor are built from the recorded
  catalog: the location loads, every other source syncs, and this source's sensor skips saying
  it is unreachable and its ``capture_health`` fails saying so until it answers again;
- only a source never recorded must answer once (the load fails with one line otherwise);
- ``dg utils refresh-defs-state`` records it on demand, and every sync run's change-log step
  records it when the catalog it reads differs from the recorded one (:class:`CatalogRecorder`).

Run workers (a load that reconstructs the definitions) build from the recorded catalog without
asking the source, so a run sees the definitions its code location showed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, Definitions
from dagster._core.definitions.definitions_load_context import (
    DefinitionsLoadContext,
    DefinitionsLoadType,
)
from dagster._core.storage.defs_state.base import DefsStateStorage
from dagster.components import ComponentLoadContext, StateBackedComponent
from dagster.components.scaffold.scaffold import Scaffolder, ScaffoldRequest, scaffold_with
from dagster.components.utils.defs_state import DefsStateConfig, DefsStateConfigArgs
from dagster.components.utils.project_paths import get_local_state_path
from dagster_shared.serdes.objects.models.defs_state_info import (
    DefsStateManagementType,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cdc_assets.config import (
    ConfigError,
    ProjectConfig,
    SourceComponentConfig,
    parse_source_component,
)
from cdc_assets.sqlserver import SourceTable, connection_factory, discover
from cdc_assets.sqlserver.errors import SqlServerError
from cdc_assets.sqlserver.recorded_catalog import dump_catalog, load_catalog

from .definitions_builder import build_definitions, shared_resources
from .sync.source import Source, source_from_catalog

log = logging.getLogger(__name__)

Catalog = dict[tuple[str, str], SourceTable]


class _DocumentedAttributes(SourceComponentConfig):
    defs_state: DefsStateConfigArgs | None = Field(
        default=None,
        description="Where the recorded catalog is kept (Dagster defs state): LOCAL_FILESYSTEM "
        "(the default, a file under the project's defs folder) or VERSIONED_STATE_STORAGE (the "
        "instance's defs_state_storage).",
    )


class SqlServerCdcSourceAttributes(BaseModel):
    """What Dagster validates a ``defs.yaml``'s attributes with: anything, so that the one
    validation (:func:`~cdc_assets.config.parse_source_component`, at load) gives the project's
    one-line messages; its JSON schema (``dg check yaml``, ``dg utils inspect-component``) is
    the documented :class:`~cdc_assets.config.SourceComponentConfig`."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return _DocumentedAttributes.model_json_schema(*args, **kwargs)


def discover_catalog(config: ProjectConfig) -> Catalog:
    """Ask the source of ``config`` for its CDC catalog (one connection, three queries)."""
    conn = connection_factory(config.sources[0].connection_settings()).connect(autocommit=True)
    try:
        return discover(conn)
    finally:
        conn.close()


@dataclass(frozen=True)
class CatalogRecorder:
    """Records a catalog a sync run read when it differs from the recorded one, where the
    component keeps it: a file (``path``), or a new version in the instance's defs state storage
    (``key``). Never fails the run: a catalog it cannot record is logged."""

    recorded: str  # the text the definitions were built from
    path: Path | None = None
    key: str | None = None

    def record(self, found: Catalog, instance: DagsterInstance | None) -> str | None:
        """Record ``found`` if it differs; what was done, for the run's log (None: nothing)."""
        text = dump_catalog(found)
        if _tables(text) == _tables(self.recorded):
            return None
        try:
            if self.path is not None:
                _write_atomically(self.path, _stamped(found))
            elif self.key is not None and instance is not None:
                storage = instance.defs_state_storage
                if storage is None:
                    return None
                upload = Path(os.environ.get("TMPDIR", "/tmp")) / f"cdc_catalog_{uuid.uuid4()}"
                try:
                    upload.write_text(_stamped(found), encoding="utf-8")
                    version = str(uuid.uuid4())
                    storage.upload_state_from_path(self.key, version=version, path=upload)
                    storage.set_latest_version(self.key, version)
                finally:
                    upload.unlink(missing_ok=True)
            else:
                return None
        except OSError as exc:
            return f"the source's catalog changed but could not be recorded: {exc}"
        return (
            "the source's catalog changed (tables or capture instances): recorded; reload the "
            "code location to show new tables"
        )


def _tables(text: str) -> Any:
    """The catalog in ``text`` without when it was discovered."""
    return dump_catalog(load_catalog(text))


def _stamped(found: Catalog) -> str:
    return dump_catalog(found, discovered_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def _write_atomically(path: Path, text: str) -> None:
    """``text`` as ``path``'s whole content, or its old content if this fails half way: a
    temporary file renamed over it. Only for the recorded catalog on a local file system (the
    project's defs state, ``$CDC_ASSETS_STATE_DIR``, ``$DAGSTER_HOME/cdc_assets_catalog`` or
    beside the config file), never asset storage; on an object store the catalog goes to the
    instance's defs state storage (the upload above)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


class SourceNeverRecorded(ConfigError):
    """A source with no recorded catalog did not answer: there is nothing to build from."""


class ScaffoldParams(BaseModel):
    name: str | None = Field(
        default=None,
        description="The source's name ([a-z][a-z0-9_]*; default: the folder's name).",
    )


_DEFS_YAML = """\
type: {type_name}

# One SQL Server source with change data capture: every captured table becomes a change-log
# asset (cdc/{name}/<schema>/<table>_changes) and a mirror (mirror/{name}/<schema>/<table>_mirror),
# kept in sync by the sensor {name}_sync_sensor. Every setting: dg utils inspect-component
# {type_name}, or the README's Configuration section. Relative paths are relative to the
# project's root. Check this file: dg check defs; see what it defines: dg list defs.
attributes:
  name: {name}                        # [a-z][a-z0-9_]*: part of asset keys, job and sensor names
  connection:                         # exactly one of odbc / emulator / dsn
    odbc:
      server: sql1.example.com
      database: shop                  # the CDC-enabled database
      user: cdc_reader                # omit user for integrated (Kerberos) authentication
      password_env: SHOP_DB_PASSWORD  # the NAME of the environment variable holding the password
      # port: 1433                    # or instance: NAME (not both)
      # driver: ODBC Driver 18 for SQL Server   # or FreeTDS
      # encrypt: "yes"                # yes | no | strict
      # trust_server_certificate: false
    # emulator: {{path: .demo/source.db}}            # the embedded emulator (a SQLite file)
    # dsn: {{connection_string_env: SHOP_ODBC_DSN}}  # a whole ODBC connection string
  tables:
    include: ["*"]                    # "schema.table" glob patterns, case-insensitive
    exclude: []
  # sync: {{sensor_interval_seconds: 5, max_transactions_per_range: 10000, on_gap: resnapshot,
  #        retain_ranges: 1d, tables_in_parallel: 4}}
  # snapshot: {{mode: auto, chunk_rows: 250000}}     # auto | exact | fuzzy
  # maintenance: {{cron: "0 * * * *", keep_history: 7d, keep_runs: 30d}}
  # owners: ["team:data-platform"]
  # columns: {{hash_key_env: PII_HASH_KEY,        # exclude | hash | redact | null (README)
  #           rules: [{{tables: "dbo.customers", columns: [email], rule: hash}}]}}
  storage:                            # the same for every source of the project
    base_path: data/cdc_assets        # a directory, or s3a://bucket/prefix, abfss://...
  # spark: {{master: "local[*]"}}     # or remote: sc://host:15002 (Spark Connect); the same for
  #                                   # every source of the project
  # defs_state: {{management_type: LOCAL_FILESYSTEM}}  # where the recorded catalog is kept
"""


class SqlServerCdcSourceScaffolder(Scaffolder[ScaffoldParams]):
    """Writes a commented ``defs.yaml`` for one source."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: ScaffoldRequest[ScaffoldParams]) -> None:
        name = request.params.name if request.params else None
        if not name:
            name = re.sub(r"[^a-z0-9_]", "_", request.target_path.name.lower()).lstrip(
                "_0123456789"
            )
        name = name or "source"
        request.target_path.mkdir(parents=True, exist_ok=True)
        text = _DEFS_YAML.format(type_name=request.type_name, name=name)
        (request.target_path / "defs.yaml").write_text(text, encoding="utf-8")


@functools.lru_cache(maxsize=16)
def _resources(storage: str, master: str, remote: str | None, conf: tuple) -> dict[str, Any]:
    """One set of resources per storage and Spark settings: every source of a project returns
    the same objects, which Dagster needs to merge the components' definitions."""
    config = ProjectConfig.model_validate(
        {
            "sources": [{"name": "any", "connection": {"emulator": {"path": "-"}}}],
            "storage": {"base_path": storage},
            "spark": {"master": master, "remote": remote, "conf": dict(conf)},
        }
    )
    return shared_resources(config)


def project_resources(config: ProjectConfig) -> dict[str, Any]:
    spark = config.spark
    conf = tuple(sorted(spark.conf.items()))
    return _resources(str(config.storage.base_path), spark.master, spark.remote, conf)


@scaffold_with(SqlServerCdcSourceScaffolder)
class SqlServerCdcSource(StateBackedComponent):
    """One SQL Server source with change data capture: its captured tables as change-log and
    mirror assets with their checks, the sync job and sensor, the health and maintenance jobs.

    Attributes are the source's settings (name, connection, tables, sync, snapshot,
    maintenance, owners) and where its assets go (storage, spark). The definitions are built
    from the source's catalog as last recorded, so a source that does not answer at load time
    keeps its assets (its sensor then skips saying it is unreachable).
    """

    def __init__(
        self,
        config: ProjectConfig,
        *,
        defs_state: DefsStateConfigArgs | None = None,
        state_file: Path | None = None,
    ) -> None:
        """``state_file``: keep the recorded catalog in this file instead of Dagster's defs
        state (a code location configured by a ``cdc_assets.yaml``, which is no ``dg``
        project)."""
        self.config = config
        self.defs_state = defs_state or DefsStateConfigArgs.local_filesystem()
        self.state_file = state_file
        self._fresh: Catalog | None = None  # discovered, about to be recorded
        self.unreachable: str | None = None  # why the last load built from the record

    @property
    def name(self) -> str:
        return self.config.sources[0].name

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return SqlServerCdcSourceAttributes

    @classmethod
    def load(
        cls, attributes: BaseModel | None, context: ComponentLoadContext
    ) -> SqlServerCdcSource:
        raw = dict(attributes.model_extra or {}) if attributes is not None else {}
        origin = str(context.path / "defs.yaml") if context.path.is_dir() else str(context.path)
        resolved = context.resolution_context.at_path("attributes").resolve_value(raw)
        state_args = resolved.pop("defs_state", None)
        config = parse_source_component(resolved, base_dir=context.project_root, origin=origin)
        defs_state = None
        if state_args is not None:
            problem = ""
            try:
                defs_state = DefsStateConfigArgs.model_validate(state_args)
            except ValidationError as exc:
                problem = "; ".join(
                    f"defs_state.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                    for e in exc.errors(include_url=False)
                )
            if problem:
                raise ConfigError(
                    f"{origin} is not a valid cdc_assets configuration: source "
                    f"{config.sources[0].name!r}: {problem}"
                )
        component = cls(config, defs_state=defs_state)
        context.component_tree.mark_component_defs_state_key(
            defs_state_key=component.defs_state_config.key, loc=context.component_loc
        )
        return component

    @property
    def defs_state_config(self) -> DefsStateConfig:
        return DefsStateConfig.from_args(
            self.defs_state, default_key=f"SqlServerCdcSource[{self.name}]"
        )

    # -- recording ------------------------------------------------------------------------

    def write_state_to_path(self, state_path: Path) -> None:
        found = self._fresh if self._fresh is not None else discover_catalog(self.config)
        state_path.write_text(_stamped(found), encoding="utf-8")

    async def refresh_state(self, project_root: Path) -> str:
        """Ask the source first: one that does not answer leaves the recorded catalog as it is
        (Dagster's store deletes the old file before it writes the new one)."""
        if self._fresh is None:
            self._fresh = await asyncio.to_thread(discover_catalog, self.config)
        try:
            return await super().refresh_state(project_root)
        finally:
            self._fresh = None

    def _record(self, found: Catalog, project_root: Path) -> None:
        if self.state_file is not None:
            _write_atomically(self.state_file, _stamped(found))
            return
        self._fresh = found
        version = asyncio.run(self.refresh_state(project_root))
        DefinitionsLoadContext.get().add_defs_state_info(self.defs_state_config.key, version)

    def _recorded(self, project_root: Path) -> str | None:
        if self.state_file is not None:
            return (
                self.state_file.read_text(encoding="utf-8") if self.state_file.is_file() else None
            )
        load_context = DefinitionsLoadContext.get()
        with load_context.state_path(
            self.defs_state_config, DefsStateStorage.get(), project_root
        ) as path:
            return path.read_text(encoding="utf-8") if path is not None else None

    def _recorder(self, recorded: str, project_root: Path) -> CatalogRecorder | None:
        if self.state_file is not None:
            return CatalogRecorder(recorded, path=self.state_file)
        config = self.defs_state_config
        if config.management_type == DefsStateManagementType.LOCAL_FILESYSTEM:
            return CatalogRecorder(recorded, path=get_local_state_path(config.key, project_root))
        if config.management_type == DefsStateManagementType.VERSIONED_STATE_STORAGE:
            return CatalogRecorder(recorded, key=config.key)
        return None  # in-memory state of the code server: recorded at each of its starts

    # -- loading --------------------------------------------------------------------------

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        return self.definitions(context.project_root)

    def build_defs_from_state(
        self, context: ComponentLoadContext, state_path: Path | None
    ) -> Definitions:
        if state_path is None:
            return Definitions()
        text = state_path.read_text(encoding="utf-8")
        source = self._source(load_catalog(text), text, context.project_root)
        return build_definitions(self.config, [source], resources=project_resources(self.config))

    def definitions(self, project_root: Path) -> Definitions:
        """The source's definitions (see the module doc for when the source is asked)."""
        source = self.load_source(project_root)
        return build_definitions(self.config, [source], resources=project_resources(self.config))

    def load_source(self, project_root: Path) -> Source:
        """The source with the tables of its catalog: discovered now and recorded, or, when it
        does not answer, as recorded (:attr:`unreachable` then says why)."""
        found: Catalog | None = None
        failure = ""
        initializing = DefinitionsLoadContext.get().load_type == DefinitionsLoadType.INITIALIZATION
        if initializing:
            try:
                found = discover_catalog(self.config)
            except SqlServerError as exc:
                failure = str(exc)
        recorded = None if found is not None else self._recorded(project_root)
        if found is None and recorded is None and not initializing:
            try:  # a run worker without the recorded catalog (a pod of its own): ask now
                found = discover_catalog(self.config)
            except SqlServerError as exc:
                failure = str(exc)
        if found is None and recorded is None:
            raise SourceNeverRecorded(
                f"source {self.name!r}: {failure} (the source has not answered since it was "
                "configured: it must answer once so that its captured tables are recorded)"
            )
        self.unreachable = failure or None
        if found is not None:
            recorded = dump_catalog(found)
            # the tables selected first: a config that does not fit them (a column rule naming
            # no column, an include matching no table) stops the load with nothing recorded
            source = self._source(found, recorded, project_root)
            if initializing:
                self._record(found, project_root)
            return source
        assert recorded is not None
        if failure:
            log.warning(
                "source %r does not answer (%s): its definitions are built from the catalog "
                "recorded earlier; its sensor skips until it answers",
                self.name,
                failure,
            )
        found = load_catalog(recorded, origin=f"the recorded catalog of source {self.name!r}")
        return self._source(found, recorded, project_root)

    def _source(self, found: Catalog, recorded: str, project_root: Path) -> Source:
        return source_from_catalog(
            self.config.sources[0],
            found,
            self.config.storage.base_path,
            recorder=self._recorder(recorded, project_root),
        )
