"""The configuration file: loading, defaults, path resolution, table selection, and errors that
name the source and the wrong setting, with the value given but never a password."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import yaml

from cdc_assets.config import (
    CONFIG_ENV,
    ConfigError,
    ProjectConfig,
    TableSelection,
    load_config,
    parse_config,
    parse_source_component,
)
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.spark_connect_address import spark_connect_address
from cdc_assets.sqlserver import OdbcSettings

ROOT = Path(__file__).resolve().parent.parent
SECRET = "Sup3r-Secret!"

MINIMAL = """\
sources:
  - name: demo
    connection:
      emulator: {path: data/source.db}
storage:
  base_path: out/storage
"""


def write(tmp_path: Path, text: str, name: str = "cdc_assets.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str) -> str:
    """The message of the ConfigError the file ``text`` raises (one line, one message)."""
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    return message


def source_yaml(name: str = "demo", connection: str = "{emulator: {path: s.db}}", **extra: str):
    """One source entry of the ``sources`` list (``extra``: more keys, as YAML flow text)."""
    lines = [f"  - name: {name!r}", f"    connection: {connection}"]
    lines += [f"    {key}: {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def document(*sources: str, storage: str = "{base_path: st}") -> str:
    return "sources:\n" + "".join(sources) + f"storage: {storage}\n"


# -- loading and defaults ------------------------------------------------------------------------


def test_minimal_file_loads_with_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert isinstance(config, ProjectConfig)
    (source,) = config.sources
    assert source.name == "demo"
    assert source.sync.sensor_interval_seconds == 5
    assert source.sync.min_range_interval_seconds == 0
    assert source.sync.max_transactions_per_range == 10_000
    assert source.snapshot.mode == "auto"
    assert source.snapshot.chunk_rows == 250_000
    assert source.tables.include == ("*",)
    assert source.tables.exclude == ()
    assert config.spark.conf == {}
    assert config.source("demo") is source
    settings = source.connection_settings()
    assert isinstance(settings, EmulatorSettings)


def test_relative_paths_resolve_against_the_config_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the config's directory: the paths must not follow the cwd
    config = load_config(write(conf_dir, MINIMAL))
    emulator = config.sources[0].connection.emulator
    assert emulator is not None
    assert emulator.path == conf_dir.resolve() / "data" / "source.db"
    assert config.storage.base_path == str(conf_dir.resolve() / "out" / "storage")


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    db, storage = tmp_path / "abs" / "s.db", tmp_path / "abs" / "storage"
    text = document(
        source_yaml(connection=f"{{emulator: {{path: '{db}'}}}}"),
        storage=f"{{base_path: '{storage}'}}",
    )
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    config = load_config(write(conf_dir, text))
    assert config.sources[0].connection.emulator is not None
    assert config.sources[0].connection.emulator.path == db
    assert config.storage.base_path == str(storage)


def test_environment_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, MINIMAL.replace("name: demo", "name: from_env"), name="other.yaml")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    write(tmp_path, MINIMAL.replace("name: demo", "name: in_cwd"))
    monkeypatch.chdir(tmp_path)  # a cdc_assets.yaml is here too: the variable must win over it
    assert load_config().sources[0].name == "from_env"
    # an explicit path wins over the variable
    assert load_config(write(tmp_path, MINIMAL)).sources[0].name == "demo"


def test_default_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    write(tmp_path, MINIMAL)
    monkeypatch.chdir(tmp_path)
    assert load_config().storage.base_path == str(tmp_path.resolve() / "out" / "storage")


def test_demo_component_instance_is_valid() -> None:
    """The demo source's defs.yaml (this repository as a dg project): relative paths are
    relative to the project's root."""
    path = ROOT / "cdc_assets" / "defs" / "demo" / "defs.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert document["type"] == "cdc_assets.SqlServerCdcSource"
    config = parse_source_component(document["attributes"], base_dir=ROOT, origin=str(path))
    demo = config.source("demo")
    assert demo.connection.emulator is not None
    assert demo.connection.emulator.path == ROOT / ".demo" / "source.db"
    assert config.storage.base_path == str(ROOT / ".demo" / "storage")
    assert config.spark.master == "local[2]"
    assert demo.snapshot.mode == "auto"


def test_unknown_source_lists_the_configured_names(tmp_path: Path) -> None:
    text = document(source_yaml("alpha"), source_yaml("beta"))
    config = load_config(write(tmp_path, text))
    with pytest.raises(ConfigError, match="no source named 'x'") as info:
        config.source("x")
    assert "alpha" in str(info.value) and "beta" in str(info.value)


# -- table selection -----------------------------------------------------------------------------


def test_table_selection_default_includes_everything() -> None:
    selection = TableSelection()
    assert selection.matches("dbo", "orders")
    assert selection.matches("sales", "order lines")


def test_table_selection_include_and_exclude_globs_case_insensitive() -> None:
    selection = TableSelection(include=("dbo.*", "Sales.Orders"), exclude=("DBO.audit_*",))
    assert selection.matches("dbo", "customers")
    assert selection.matches("DBO", "Customers")
    assert selection.matches("sales", "ORDERS")
    assert not selection.matches("sales", "order_lines")
    assert not selection.matches("dbo", "audit_log")
    assert not selection.matches("Dbo", "AUDIT_2024")
    assert not selection.matches("other", "customers")
    only = TableSelection(include=("dbo.order ?ines",))
    assert only.matches("dbo", "order lines")
    assert not only.matches("dbo", "orders")


def test_table_selection_from_yaml(tmp_path: Path) -> None:
    text = document(source_yaml(tables="{include: ['dbo.*'], exclude: ['*.events']}"))
    tables = load_config(write(tmp_path, text)).sources[0].tables
    assert tables.matches("dbo", "orders")
    assert not tables.matches("dbo", "Events")


# -- errors --------------------------------------------------------------------------------------


def test_missing_file_names_the_file_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert str(missing) in str(info.value)
    assert CONFIG_ENV in str(info.value)
    monkeypatch.setenv(CONFIG_ENV, str(missing))
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config()


def test_invalid_yaml_gives_the_line(tmp_path: Path) -> None:
    text = "sources:\n  - name: demo\n    connection: {emulator: {path: x}\nstorage: {}\n"
    message = config_error(tmp_path, text)
    assert "not valid YAML" in message
    assert "line 4" in message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", ""])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    message = config_error(tmp_path, text)
    assert "expected a mapping" in message


def test_parse_config_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^inline: expected a mapping"):
        parse_config(["sources"], base_dir=Path("."), origin="inline")


@pytest.mark.parametrize("name", ["Demo-1", "1demo", "demo-1", "", "x" * 41])
def test_bad_source_name(tmp_path: Path, name: str) -> None:
    message = config_error(tmp_path, document(source_yaml(name)))
    assert (f"source {name!r}: name:" if name else "source 1: name:") in message
    assert ";" not in message, message  # that field alone is wrong


def test_duplicate_source_names(tmp_path: Path) -> None:
    message = config_error(tmp_path, document(source_yaml("a"), source_yaml("b"), source_yaml("a")))
    assert "sources: source names must be unique; repeated: a" in message


def test_sources_required_and_not_empty(tmp_path: Path) -> None:
    assert "sources: Field required" in config_error(tmp_path, "storage: {base_path: st}\n")
    message = config_error(tmp_path, "sources: []\nstorage: {base_path: st}\n")
    assert "sources: configure at least one source" in message
    assert "storage" not in message.split("configuration:")[1]


def test_storage_required(tmp_path: Path) -> None:
    message = config_error(tmp_path, "sources:\n" + source_yaml())
    assert "storage: Field required" in message


@pytest.mark.parametrize(
    ("connection", "given"),
    [
        ("{}", "none"),
        ("{emulator: {path: a.db}, dsn: {connection_string_env: DSN}}", "['emulator', 'dsn']"),
        (
            "{emulator: {path: a.db}, odbc: {server: s, database: d, user: u, password_env: P}}",
            "['emulator', 'odbc']",
        ),
    ],
)
def test_connection_needs_exactly_one_kind(tmp_path: Path, connection: str, given: str) -> None:
    message = config_error(tmp_path, document(source_yaml(connection=connection)))
    assert "source 'demo': connection: give exactly one of" in message
    assert f"got {given}" in message
    assert "; sources:" not in message, message  # no follow-up complaint about the list


def test_invalid_source_does_not_also_blame_the_sources_list(tmp_path: Path) -> None:
    """One bad field in the only source must be reported once, by its own path — not also as
    'sources: should have at least 1 item' (the list is not empty)."""
    message = config_error(tmp_path, document(source_yaml(sync="{sensor_interval_seconds: 0}")))
    assert "source 'demo': sync.sensor_interval_seconds:" in message
    assert "(got 0)" in message
    assert "at least 1 item" not in message
    assert "; sources:" not in message


def test_unknown_key_is_named_by_its_path(tmp_path: Path) -> None:
    message = config_error(tmp_path, document(source_yaml(sync="{bogus: 1}")))
    assert "source 'demo': sync.bogus: unknown setting; known: sensor_interval_seconds," in message
    message = config_error(tmp_path, MINIMAL + "colour: blue\n")
    assert "colour: unknown setting; known: sources, storage, spark, examples" in message


def test_misspelt_setting_says_did_you_mean(tmp_path: Path) -> None:
    """The typo of issue 20: one line naming the source, the setting and the right key."""
    text = document(source_yaml("shop", sync="{sensor_intervall_seconds: 5}"))
    message = config_error(tmp_path, text)
    assert message == (
        f"{tmp_path / 'cdc_assets.yaml'} is not a valid cdc_assets configuration: source 'shop': "
        "sync.sensor_intervall_seconds: unknown setting; did you mean 'sensor_interval_seconds'?"
    )
    text = document(source_yaml("shop", connection="{emulator: {pth: s.db}}"))
    message = config_error(tmp_path, text)
    assert "source 'shop': connection.emulator.pth: unknown setting; did you mean 'path'?" in (
        message
    )


def test_second_source_errors_carry_its_index(tmp_path: Path) -> None:
    text = document(source_yaml("a"), source_yaml("b", snapshot="{chunk_rows: -5}"))
    message = config_error(tmp_path, text)
    assert "source 'b': snapshot.chunk_rows:" in message
    assert "(got -5)" in message
    assert "source 'a'" not in message


def test_bad_snapshot_mode_and_chunk_rows_in_one_message(tmp_path: Path) -> None:
    message = config_error(tmp_path, document(source_yaml(snapshot="{mode: fast, chunk_rows: 0}")))
    mode = "source 'demo': snapshot.mode: Input should be 'auto', 'exact' or 'fuzzy' (got 'fast')"
    assert mode in message
    assert "source 'demo': snapshot.chunk_rows: Input should be greater than or equal to 1" in (
        message
    )


def test_bad_values_elsewhere(tmp_path: Path) -> None:
    text = document(source_yaml(), storage="{base_path: st, extra: 1}") + "spark: {master: ''}\n"
    message = config_error(tmp_path, text)
    assert "storage.extra: unknown setting; known: base_path" in message
    assert "spark.master:" in message


# -- secrets -------------------------------------------------------------------------------------

ODBC_WITH_SECRET = f"{{odbc: {{server: sql1, database: shop, user: reader, password: {SECRET!r}}}}}"


def chain_text(exc: BaseException) -> str:
    """Everything an exception carries: its message, its full traceback text and, recursively,
    every chained exception, suppressed or not (error reporters may walk them)."""
    parts = ["".join(traceback.format_exception(exc)), repr(exc)]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(getattr(current, "args", ()))]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    "text",
    [
        # the wrong field is somewhere else
        document(source_yaml(connection=ODBC_WITH_SECRET, snapshot="{mode: fast}")),
        document(source_yaml(connection=ODBC_WITH_SECRET), storage="{base_path: [1]}"),
        document(source_yaml(connection=ODBC_WITH_SECRET), source_yaml("Bad-Name")),
        # the connection holding the secret is itself the wrong field
        document(
            source_yaml(
                connection=f"{{emulator: {{path: a.db}}, odbc: {{server: s, database: d, "
                f"user: u, password: {SECRET!r}}}}}"
            )
        ),
        document(
            source_yaml(
                connection="{odbc: {server: s, database: d, user: u, "
                f"password: {SECRET!r}, password_env: P}}}}"
            )
        ),
        # the password given where the variable's name belongs
        document(
            source_yaml(
                connection="{odbc: {server: s, database: d, user: u, "
                f"password_env: {SECRET!r}}}}}"
            )
        ),
    ],
)
def test_errors_never_contain_the_password(tmp_path: Path, text: str) -> None:
    assert SECRET in text
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert "source" in str(info.value) or "storage" in str(info.value)
    assert SECRET not in chain_text(info.value)


def test_yaml_error_never_contains_the_password(tmp_path: Path) -> None:
    # the syntax error is on the password's line: PyYAML's own error text quotes that line
    text = (
        "sources:\n  - name: demo\n    connection:\n      odbc:\n        server: s\n"
        f"        password: {SECRET!r} oops\n"
    )
    with pytest.raises(ConfigError, match=r"not valid YAML at line 6, column \d+") as info:
        load_config(write(tmp_path, text))
    assert SECRET not in chain_text(info.value)


def test_password_in_the_file_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, document(source_yaml(connection=ODBC_WITH_SECRET))))
    assert "source 'demo': connection" in str(caught.value)
    assert "password_env" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_password_from_the_environment_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_TEST_DB_PASSWORD", SECRET)
    connection = (
        "{odbc: {server: db.example.com, database: shop, user: cdc_reader, "
        "password_env: CDC_TEST_DB_PASSWORD}}"
    )
    config = load_config(write(tmp_path, document(source_yaml(connection=connection))))
    settings = config.sources[0].connection_settings()
    assert isinstance(settings, OdbcSettings)
    password = settings.resolve_password()
    assert password is not None and password.get_secret_value() == SECRET  # there, never shown
    for shown in (repr(config), str(config), repr(config.sources[0]), repr(settings)):
        assert SECRET not in shown
    assert SECRET not in settings.connection_string()
    assert SECRET not in config.model_dump_json()


def test_dsn_variable_not_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDC_TEST_NOT_SET_DSN", raising=False)
    text = document(source_yaml(connection="{dsn: {connection_string_env: CDC_TEST_NOT_SET_DSN}}"))
    source = load_config(write(tmp_path, text)).sources[0]
    with pytest.raises(ConfigError, match="CDC_TEST_NOT_SET_DSN is not set"):
        source.connection_settings()
    monkeypatch.setenv("CDC_TEST_NOT_SET_DSN", f"DRIVER=x;PWD={SECRET}")
    settings = source.connection_settings()
    assert SECRET not in repr(settings)


def test_yaml_fixture_helpers_produce_valid_yaml() -> None:
    """Guard for the helpers above: a typo in them must not masquerade as a config error."""
    data = yaml.safe_load(document(source_yaml(connection=ODBC_WITH_SECRET, snapshot="{}")))
    assert data["sources"][0]["connection"]["odbc"]["password"] == SECRET
    assert data["storage"] == {"base_path": "st"}


# -- retention and Spark Connect -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1d", (None, 86400.0)),
        ("90s", (None, 90.0)),
        ("12h", (None, 43200.0)),
        ("500", (500, None)),
    ],
)
def test_retain_ranges_is_a_duration_or_a_count(
    tmp_path: Path, value: str, expected: object
) -> None:
    text = document(source_yaml(sync=f"{{retain_ranges: {value}}}"))
    assert load_config(write(tmp_path, text)).sources[0].sync.retention() == expected


def test_retain_ranges_defaults_to_a_day(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL)).sources[0].sync.retention() == (None, 86400.0)


@pytest.mark.parametrize("value", ["0", "1 week", "-1d"])
def test_bad_retain_ranges_says_what_to_give(tmp_path: Path, value: str) -> None:
    message = config_error(tmp_path, document(source_yaml(sync=f"{{retain_ranges: '{value}'}}")))
    assert "retain_ranges" in message and ("duration" in message or "count" in message), message


def test_spark_remote_takes_a_connect_url(tmp_path: Path) -> None:
    text = MINIMAL + "spark: {remote: 'sc://127.0.0.1:15002'}\n"
    assert load_config(write(tmp_path, text)).spark.remote == "sc://127.0.0.1:15002"
    message = config_error(tmp_path, MINIMAL + "spark: {remote: 'http://spark:7077'}\n")
    assert "spark.remote" in message and "sc://host:port" in message, message


def test_spark_connect_address_is_read_one_way_everywhere() -> None:
    # the config's check, the Spark Connect launcher and the demo's supervisor share this parser
    assert spark_connect_address("sc://127.0.0.1:15010") == ("127.0.0.1", 15010)
    assert spark_connect_address("sc://spark") == ("spark", 15002)
    assert spark_connect_address("sc://spark:15003/;token=abc") == ("spark", 15003)
    for url in ("http://spark:7077", "sc://", "sc://a b:1", None):
        assert spark_connect_address(url) is None, url
