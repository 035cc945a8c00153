"""The deployment files under ``deploy/`` fit together: checked by reading them, without Docker,
Kubernetes, SQL Server or Spark (no container can run here).

- the compose file has every service (SQL Server 2022 and its one-shot init, PostgreSQL 16, the
  code location, the webserver, the daemon, a Spark master and worker), in the right start order;
  every build context, Dockerfile, mounted file and file a command names exists in the repository;
  the instance every Dagster service mounts is ``deploy/dagster.yaml`` with its variables set;
- every ``${VAR}`` of the compose file is documented in ``deploy/.env.example``, and no file under
  ``deploy/`` holds a literal password;
- the Dockerfile installs the system packages ``scripts/setup.sh`` installs, copies files that
  exist, installs the project, and pins the Dagster libraries the project pins;
- the Helm values use the chart's keys, deploy the project's module as a user code deployment
  whose password comes from a Secret, and queue range runs two at a time per source
  (``cdc_assets/range_lane``: one working, the next starting), snapshot runs beside them;
- ``deploy/cdc_assets.production.yaml`` is valid for the project's own parser and names the
  compose services, the database and login ``deploy/sqlserver/init.sql`` creates, the shared
  storage volume and the Spark master;
- ``init.sql`` enables CDC on the database and its tables and turns snapshot isolation on.
"""

from __future__ import annotations

import importlib.util
import re
import secrets
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from cdc_assets.config import ProjectConfig, load_config
from cdc_assets.dagster.sync.names import RANGE_LANE_TAG
from cdc_assets.sqlserver import OdbcSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
ENV_EXAMPLE = DEPLOY / ".env.example"
DOCKER_WORKSPACE = DEPLOY / "workspace.docker.yaml"
HELM_VALUES = DEPLOY / "helm" / "values.yaml"
PRODUCTION_CONFIG = DEPLOY / "cdc_assets.production.yaml"
INIT_SQL = DEPLOY / "sqlserver" / "init.sql"
DAGSTER_YAML = DEPLOY / "dagster.yaml"
SETUP_SH = REPO / "scripts" / "setup.sh"
DEV_WORKSPACE = REPO / "workspace.yaml"
PYPROJECT = REPO / "pyproject.toml"

# The variables deploy/dagster.yaml reads (the brief of the production instance).
INSTANCE_VARIABLES = (
    "DAGSTER_PG_HOST",
    "DAGSTER_PG_PORT",
    "DAGSTER_PG_USER",
    "DAGSTER_PG_PASSWORD",
    "DAGSTER_PG_DB",
)

# Packages scripts/setup.sh installs for the test suite only, which the image leaves out.
TEST_ONLY_APT_PACKAGES = {
    # cdc_assets_tests/deploy/test_postgres_instance.py starts a throwaway PostgreSQL server;
    # the deployed services use the postgres service (compose) or an external server (Helm).
    "postgresql",
    # cdc_assets_tests/ui/test_browser.py drives Debian's Chromium; production has no browser.
    "chromium",
    # javac compiles the JDBC client cdc_assets_tests/tds_server/test_jdbc.py runs; Spark needs
    # only the JRE
    "openjdk-17-jdk-headless",
}

# Top-level keys of the dagster/dagster chart (helm/dagster/values.yaml and its schema,
# helm/dagster/schema/schema/charts/dagster/values.py, in dagster-io/dagster).
CHART_KEYS = {
    "global",
    "nameOverride",
    "fullnameOverride",
    "rbacEnabled",
    "imagePullSecrets",
    "dagsterWebserver",
    "dagster-user-deployments",
    "postgresql",
    "generatePostgresqlPasswordSecret",
    "generateCeleryConfigSecret",
    "rabbitmq",
    "redis",
    "flower",
    "ingress",
    "computeLogManager",
    "scheduler",
    "runLauncher",
    "pythonLogs",
    "dagsterDaemon",
    "busybox",
    "migrate",
    "telemetry",
    "serviceAccount",
    "retention",
    "concurrency",
    "additionalInstanceConfig",
    "extraManifests",
}
# One entry of dagster-user-deployments.deployments (the subchart's values.yaml and schema).
USER_DEPLOYMENT_KEYS = {
    "name",
    "image",
    "port",
    "dagsterApiGrpcArgs",
    "codeServerArgs",
    "includeConfigInLaunchedRuns",
    "deploymentNamespace",
    "env",
    "envConfigMaps",
    "envSecrets",
    "annotations",
    "nodeSelector",
    "affinity",
    "tolerations",
    "podSecurityContext",
    "securityContext",
    "resources",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "labels",
    "volumeMounts",
    "volumes",
    "schedulerName",
    "initContainers",
    "sidecarContainers",
    "service",
}
CHART_POSTGRESQL_KEYS = {
    "enabled",
    "image",
    "postgresqlScheme",
    "postgresqlHost",
    "postgresqlUsername",
    "postgresqlPassword",
    "postgresqlDatabase",
    "postgresqlParams",
    "service",
}

# A value that refers to a secret instead of holding it: compose/shell ${VAR}, ${VAR:?message}
# or $VAR (never ${VAR:-default}: the default would be a literal), sqlcmd $(VAR).
REFERENCE = re.compile(
    r"^(?:\$+\{[A-Za-z_]\w*(?::?\?[^}]*)?\}|\$+\([A-Za-z_]\w*\)|\$+[A-Za-z_]\w*)$"
)
# `<...password...> = value` or `<...password...>: value` on one line.
PASSWORD_ASSIGNMENT = re.compile(
    r"(?i)(?P<key>[\w.-]*password[\w.-]*)[\"']?(?P<pre>[ \t]*)(?P<sep>=|:)[ \t]*"
    r"(?P<value>\$+\{[^}\n]*\}|N?\"[^\"\n]*\"|N?'[^'\n]*'|[^\s,;#)]*)"
)
# SQL's `PASSWORD 'value'` (PostgreSQL's CREATE ROLE, for one).
SQL_PASSWORD_LITERAL = re.compile(r"(?i)\bpassword[ \t]+(?P<value>N?'[^'\n]*')")
COMPOSE_VARIABLE = re.compile(r"(?<!\$)\$(?:\{(?P<braced>[A-Za-z_]\w*)|(?P<bare>[A-Za-z_]\w*))")


# -- reading the files -----------------------------------------------------------------------------


def _yaml(path: Path) -> Any:
    assert path.is_file(), f"{path.relative_to(REPO)} is missing"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _yaml(COMPOSE_FILE)
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _argv(service: dict[str, Any]) -> list[str]:
    """The service's entrypoint followed by its command, as one argument list."""
    argv: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, str):
            argv += shlex.split(value)
        elif isinstance(value, list):
            argv += [str(v) for v in value]
    return argv


def _option(argv: list[str], *names: str) -> str | None:
    """The value following the first of ``names`` in ``argv``."""
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(str(item).partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _volumes(service: dict[str, Any]) -> Iterator[tuple[str, str, PurePosixPath]]:
    """``(kind, source, target)`` per volume: kind ``bind`` (source a host path as written) or
    ``volume`` (source a named volume)."""
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            source, target = str(entry.get("source", "")), str(entry["target"])
            kind = str(entry.get("type", "volume"))
        else:
            parts = str(entry).split(":")
            source, target = parts[0], parts[1] if len(parts) > 1 else parts[0]
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        yield kind, source, PurePosixPath(target)


def _binds(service: dict[str, Any]) -> list[tuple[Path, PurePosixPath]]:
    """Bind mounts as ``(host path resolved like compose does: relative to deploy/, target)``."""
    return [
        ((DEPLOY / source).resolve(), target)
        for kind, source, target in _volumes(service)
        if kind == "bind"
    ]


def _host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """The host file a bind mount shows at ``container_path``, or None if no bind covers it."""
    path = PurePosixPath(container_path)
    for host, target in _binds(service):
        if path == target or target in path.parents:
            return host.joinpath(*path.relative_to(target).parts)
    return None


ROLES = (
    "sqlserver",
    "sqlserver-init",
    "postgres",
    "code-location",
    "webserver",
    "daemon",
    "spark-master",
    "spark-worker",
    "spark-connect",
)


def _role(service: dict[str, Any]) -> str | None:
    image = str(service.get("image", ""))
    argv = _argv(service)
    if image.startswith("mcr.microsoft.com/mssql/server:"):
        return "sqlserver-init" if any(a.endswith("sqlcmd") for a in argv) else "sqlserver"
    if image.startswith("postgres:"):
        return "postgres"
    if argv[:3] == ["dagster", "api", "grpc"]:
        return "code-location"
    if argv[:1] == ["dagster-webserver"]:
        return "webserver"
    if argv[:2] == ["dagster-daemon", "run"]:
        return "daemon"
    if "org.apache.spark.deploy.master.Master" in argv:
        return "spark-master"
    if "org.apache.spark.deploy.worker.Worker" in argv:
        return "spark-worker"
    if argv[:3] == ["python", "-m", "cdc_assets.spark.connect_server"]:
        return "spark-connect"
    return None


@pytest.fixture(scope="module")
def roles(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Role → the name of the one service that plays it."""
    found: dict[str, list[str]] = {role: [] for role in ROLES}
    for name, service in services.items():
        role = _role(service)
        if role is not None:
            found[role].append(name)
    wrong = {role: names for role, names in found.items() if len(names) != 1}
    assert not wrong, f"each role needs exactly one compose service; got {wrong}"
    return {role: names[0] for role, names in found.items()}


def _service(services: dict[str, dict[str, Any]], roles: dict[str, str], role: str) -> Any:
    return services[roles[role]]


@pytest.fixture(scope="module")
def production() -> ProjectConfig:
    return load_config(PRODUCTION_CONFIG)


@pytest.fixture(scope="module")
def odbc(production: ProjectConfig) -> OdbcSettings:
    assert len(production.sources) == 1, "the example configures the compose stack's one source"
    settings = production.sources[0].connection.odbc
    assert settings is not None, "the production example connects with `connection: odbc:`"
    return settings


def _dev_location() -> dict[str, Any]:
    entries = _yaml(DEV_WORKSPACE)["load_from"]
    assert len(entries) == 1
    return entries[0]["python_module"]


def _dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)``, continuation lines joined, comments dropped."""
    lines = [
        line
        for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()
        if not line.strip().startswith("#")
    ]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    instructions = []
    for line in text.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            instructions.append((instruction.upper(), args.strip()))
    return instructions


def _dockerfile_args() -> dict[str, str]:
    args = {}
    for instruction, text in _dockerfile():
        if instruction == "ARG" and "=" in text:
            name, _, value = text.partition("=")
            args[name.strip()] = value.strip().strip('"')
    return args


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)


def _commands(run: str) -> list[list[str]]:
    """The shell commands of a RUN line (split at unquoted &&, || and ;), each as arguments."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def _pinned_dagster_libraries_version() -> str:
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    for requirement in dependencies:
        match = re.fullmatch(r"dagster-pyspark==([\w.]+)", requirement.replace(" ", ""))
        if match:
            return match.group(1)
    raise AssertionError("pyproject.toml pins no dagster-pyspark version")


# -- every file ------------------------------------------------------------------------------------


def test_every_yaml_file_parses() -> None:
    files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    expected = {COMPOSE_FILE, DOCKER_WORKSPACE, HELM_VALUES, PRODUCTION_CONFIG}
    assert expected <= set(files), f"missing: {sorted(map(str, expected - set(files)))}"
    for path in files:
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            pytest.fail(f"{path.relative_to(REPO)} is not valid YAML: {exc}")
        assert all(isinstance(d, dict) for d in documents if d is not None), path


def _is_reference(value: str) -> bool:
    """A reference, or empty, or a flag (``generatePostgresqlPasswordSecret: false``)."""
    value = value.strip()
    if value in ("true", "false"):
        return True
    if value.startswith(("N'", 'N"')):
        value = value[1:]
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value == "" or bool(REFERENCE.match(value))


def _password_values(data: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every mapping key naming a password (not a ``*_env`` name)."""
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{where}.{key}" if where else str(key)
            lowered = str(key).lower()
            if "password" in lowered and not lowered.endswith("_env"):
                yield here, value
            yield from _password_values(value, here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            yield from _password_values(item, f"{where}.{i}")


def test_no_literal_password_in_deploy_files() -> None:
    """Every password is a reference: ${VAR}, $(VAR), {env: VAR}, a Secret, or empty."""
    problems = []
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        if path.name == ".env":  # the operator's own secrets file (from .env.example), if any
            continue
        name = path.relative_to(REPO)
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in PASSWORD_ASSIGNMENT.finditer(text):
            key = match.group("key").lower()
            psql_variable = match.group("sep") == ":" and match.group("pre")  # PASSWORD :'var'
            if key.endswith("_env") or psql_variable or _is_reference(match.group("value")):
                continue
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{name}:{line}: {match.group('key')} is given a literal value")
        for match in SQL_PASSWORD_LITERAL.finditer(text):
            if not _is_reference(match.group("value")):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{name}:{line}: PASSWORD is given a literal value")
        if path.suffix in (".yaml", ".yml"):
            for document in yaml.safe_load_all(text):
                for key, value in _password_values(document):
                    env_source = isinstance(value, dict) and set(value) == {"env"}
                    if value is None or isinstance(value, bool) or env_source:
                        continue
                    if not (isinstance(value, str) and _is_reference(value)):
                        problems.append(f"{name}: {key} is not an environment reference")
    assert not problems, "literal passwords:\n" + "\n".join(problems)


# -- docker-compose.yml ----------------------------------------------------------------------------


def test_compose_has_every_service(roles: dict[str, str]) -> None:
    assert set(roles) == set(ROLES)


def test_compose_images(services: dict[str, dict[str, Any]], roles: dict[str, str]) -> None:
    assert _service(services, roles, "sqlserver")["image"] == (
        "mcr.microsoft.com/mssql/server:2022-latest"
    )
    postgres = _service(services, roles, "postgres")["image"]
    assert postgres == "postgres:16" or postgres.startswith("postgres:16-"), postgres
    built = (
        "code-location",
        "webserver",
        "daemon",
        "spark-master",
        "spark-worker",
        "spark-connect",
    )
    images = {_service(services, roles, role).get("image") for role in built}
    assert len(images) == 1, f"the Dagster and Spark services run one image; got {images}"


def test_compose_builds_from_existing_context_and_dockerfile(
    services: dict[str, dict[str, Any]],
) -> None:
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert built, "no service builds the image"
    for name, build in built.items():
        build = {"context": build} if isinstance(build, str) else build
        context = (DEPLOY / build.get("context", ".")).resolve()
        dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
        assert context.is_dir(), f"{name}: build context {context} does not exist"
        assert context == REPO, f"{name}: the build context is the repository root"
        assert dockerfile == DOCKERFILE, f"{name}: builds {dockerfile}, not deploy/Dockerfile"


def test_compose_mounted_paths_exist(compose: dict[str, Any]) -> None:
    missing, undeclared = [], []
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for kind, source, _target in _volumes(service):
            if kind == "bind" and not (DEPLOY / source).resolve().exists():
                missing.append(f"{name}: {source}")
            if kind == "volume" and source and source not in declared:
                undeclared.append(f"{name}: {source}")
    assert not missing, f"bind-mounted host paths missing (relative to deploy/): {missing}"
    assert not undeclared, f"named volumes not declared under volumes: {undeclared}"


def test_compose_paths_in_commands_and_environment_exist(
    services: dict[str, dict[str, Any]],
) -> None:
    """An absolute path a command or variable names, under a bind mount, exists on the host."""
    missing = []
    for name, service in services.items():
        values = _argv(service) + list(_environment(service).values())
        for value in values:
            if value.startswith("/"):
                host = _host_path(service, value)
                if host is not None and not host.exists():
                    missing.append(f"{name}: {value} -> {host}")
    assert not missing, f"files named in commands or environment are missing: {missing}"


def test_compose_start_order(services: dict[str, dict[str, Any]], roles: dict[str, str]) -> None:
    def condition(role: str, on: str) -> str | None:
        depends = _service(services, roles, role).get("depends_on") or {}
        entry = depends.get(roles[on]) if isinstance(depends, dict) else None
        return entry.get("condition") if isinstance(entry, dict) else None

    assert condition("sqlserver-init", "sqlserver") == "service_healthy"
    assert condition("code-location", "sqlserver-init") == "service_completed_successfully"
    assert condition("code-location", "postgres") == "service_healthy"
    for role in ("webserver", "daemon"):
        assert condition(role, "postgres") == "service_healthy", role
        assert condition(role, "code-location") == "service_healthy", role
    for role in ("sqlserver", "postgres", "code-location"):
        assert _service(services, roles, role).get("healthcheck"), f"{role} needs a healthcheck"


def test_sqlserver_service(services: dict[str, dict[str, Any]], roles: dict[str, str]) -> None:
    env = _environment(_service(services, roles, "sqlserver"))
    assert env.get("ACCEPT_EULA") == "Y"
    assert env.get("MSSQL_AGENT_ENABLED") == "true", "CDC's capture job runs in SQL Server Agent"
    assert REFERENCE.match(env.get("MSSQL_SA_PASSWORD", "")), "the sa password is a ${VAR}"


def test_init_service_runs_the_init_script(
    services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    init = _service(services, roles, "sqlserver-init")
    argv = _argv(init)
    assert _option(argv, "-S") == roles["sqlserver"], "sqlcmd connects to the sqlserver service"
    script = _option(argv, "-i")
    assert script is not None, "sqlcmd -i <the init script>"
    assert _host_path(init, script) == INIT_SQL, f"{script} is not deploy/sqlserver/init.sql"
    assert "-b" in argv, "sqlcmd -b: a failed statement fails the service"
    env = _environment(init)
    assert REFERENCE.match(env.get("SQLCMDPASSWORD", "")), "sa's password comes from ${VAR}"
    # sqlcmd takes environment variables as scripting variables: each $(NAME) must be set.
    used = set(re.findall(r"\$\((\w+)\)", INIT_SQL.read_text(encoding="utf-8")))
    assert used, "init.sql takes the login's password as a scripting variable"
    assert used <= set(env), f"init.sql uses $(...) variables the service does not set: {used}"


def test_dagster_services_mount_deploy_dagster_yaml(
    services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    for role in ("code-location", "webserver", "daemon"):
        service = _service(services, roles, role)
        env = _environment(service)
        home = env.get("DAGSTER_HOME")
        assert home, f"{role}: DAGSTER_HOME is not set"
        instance = _host_path(service, f"{home}/dagster.yaml")
        assert instance == DAGSTER_YAML, (
            f"{role}: $DAGSTER_HOME/dagster.yaml must be deploy/dagster.yaml; got {instance}"
        )
        missing = [name for name in INSTANCE_VARIABLES if not env.get(name)]
        assert not missing, f"{role}: the instance's variables are not set: {missing}"


def _env_references(data: Any) -> Iterator[str]:
    """The variables a Dagster config reads (``{env: NAME}``)."""
    if isinstance(data, dict):
        if set(data) == {"env"} and isinstance(data["env"], str):
            yield data["env"]
        for value in data.values():
            yield from _env_references(value)
    elif isinstance(data, list):
        for item in data:
            yield from _env_references(item)


def test_instance_file_exists_and_its_variables_are_set(
    services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    assert DAGSTER_YAML.is_file(), (
        "deploy/dagster.yaml (the Dagster instance on PostgreSQL, written separately) is missing: "
        "the webserver, the daemon and the code location mount it as $DAGSTER_HOME/dagster.yaml"
    )
    variables = set(_env_references(_yaml(DAGSTER_YAML)))
    assert variables, "deploy/dagster.yaml reads no variable: where is its PostgreSQL?"
    for role in ("code-location", "webserver", "daemon"):
        env = _environment(_service(services, roles, role))
        missing = sorted(variables - set(env))
        assert not missing, f"{role} does not set what deploy/dagster.yaml reads: {missing}"


def test_workspace_points_at_the_code_location(
    services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    argv = _argv(_service(services, roles, "code-location"))
    entries = _yaml(DOCKER_WORKSPACE)["load_from"]
    assert len(entries) == 1 and set(entries[0]) == {"grpc_server"}
    server = entries[0]["grpc_server"]
    assert server["host"] == roles["code-location"]
    assert str(server["port"]) == _option(argv, "-p", "--port")
    location = _dev_location()["location_name"]
    assert server["location_name"] == location == _option(argv, "--location-name")
    for role in ("webserver", "daemon"):
        service = _service(services, roles, role)
        workspace = _option(_argv(service), "-w", "--workspace")
        assert workspace and _host_path(service, workspace) == DOCKER_WORKSPACE, role


def test_code_location_serves_the_project_module(
    services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    service = _service(services, roles, "code-location")
    argv = _argv(service)
    module = _option(argv, "-m", "--module-name")
    assert module == _dev_location()["module_name"] == "cdc_assets.definitions"
    assert importlib.util.find_spec(module) is not None
    assert _option(argv, "-h", "--host") == "0.0.0.0"
    port = _option(argv, "-p", "--port")
    health = _argv({"command": service["healthcheck"]["test"][1:]})
    assert health[:3] == ["dagster", "api", "grpc-health-check"]
    assert _option(health, "-p", "--port") == port


def test_compose_variables_are_documented(compose: dict[str, Any]) -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    used = {m.group("braced") or m.group("bare") for m in COMPOSE_VARIABLE.finditer(text)}
    assert ENV_EXAMPLE.is_file(), "deploy/.env.example documents the compose variables"
    documented = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            documented[name.strip()] = value.strip()
    assert used - set(documented) == set(), f"not in deploy/.env.example: {used - set(documented)}"
    assert set(documented) - used == set(), f"documented, never used: {set(documented) - used}"
    filled = [name for name, value in documented.items() if "PASSWORD" in name and value]
    assert not filled, f"deploy/.env.example must leave passwords empty: {filled}"


# -- the production configuration against the compose stack ----------------------------------------


def test_production_config_validates(
    production: ProjectConfig, odbc: OdbcSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert odbc.password_env, "the password comes from a variable (password_env)"
    value = secrets.token_urlsafe(16)
    monkeypatch.setenv(odbc.password_env, value)
    settings = production.sources[0].connection_settings()
    assert isinstance(settings, OdbcSettings)
    resolved = settings.resolve_password()
    assert resolved is not None and resolved.get_secret_value() == value
    assert odbc.is_freetds, "the image has FreeTDS (tdsodbc), not Microsoft's driver"
    assert "PWD=***" in odbc.connection_string(redact=True)


def test_production_config_names_the_compose_source(
    odbc: OdbcSettings, services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    assert odbc.server == roles["sqlserver"]
    assert (odbc.port or 1433) == 1433
    sql = INIT_SQL.read_text(encoding="utf-8")
    databases = re.findall(r"(?i)CREATE DATABASE \[?(\w+)\]?", sql)
    logins = re.findall(r"(?i)CREATE LOGIN \[?(\w+)\]?", sql)
    assert databases == [odbc.database], f"init.sql creates {databases}"
    assert logins == [odbc.user], f"init.sql creates the logins {logins}"
    for role in ("code-location", "spark-worker"):  # the driver and the executors connect
        env = _environment(_service(services, roles, role))
        assert odbc.password_env in env, f"{role} lacks {odbc.password_env}"
        assert REFERENCE.match(env[odbc.password_env]), f"{role}: not an env reference"


def test_storage_is_one_volume_shared_with_the_spark_workers(
    production: ProjectConfig, services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    base_path = PurePosixPath(production.storage.base_path)
    assert base_path.is_absolute()
    volumes = {}
    for role in ("code-location", "spark-worker", "spark-connect"):
        mounted = [
            source
            for kind, source, target in _volumes(_service(services, roles, role))
            if kind == "volume" and target == base_path
        ]
        assert len(mounted) == 1, f"{role}: no named volume at storage.base_path {base_path}"
        volumes[role] = mounted[0]
    assert len(set(volumes.values())) == 1, f"not one shared volume: {volumes}"


def test_spark_master_url_matches_the_cluster(
    production: ProjectConfig, services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    master = _argv(_service(services, roles, "spark-master"))
    host = _option(master, "--host", "-h")
    port = _option(master, "--port", "-p") or "7077"
    assert host == roles["spark-master"]
    url = f"spark://{host}:{port}"
    assert production.spark.master == url
    assert url in _argv(_service(services, roles, "spark-worker"))


def test_runs_attach_to_the_compose_spark_connect_server(
    production: ProjectConfig, services: dict[str, dict[str, Any]], roles: dict[str, str]
) -> None:
    """spark.remote names the spark-connect service and the port it binds, on every interface
    of its container (the default 127.0.0.1 would refuse the code location's runs)."""
    server = _service(services, roles, "spark-connect")
    argv = _argv(server)
    assert production.spark.remote == f"sc://{roles['spark-connect']}:{_option(argv, '--port')}"
    assert _option(argv, "--host") == "0.0.0.0"
    depends = server.get("depends_on") or {}
    assert roles["spark-worker"] in depends, "the server's driver needs the cluster"
    code_location = _service(services, roles, "code-location").get("depends_on") or {}
    assert code_location.get(roles["spark-connect"], {}).get("condition") == "service_healthy"
    env = _environment(server)
    assert "CDC_ASSETS_CONFIG" in env and "CDC_ASSETS_DB_PASSWORD" in env


# -- deploy/sqlserver/init.sql ---------------------------------------------------------------------


def test_init_sql_enables_cdc_and_snapshot_isolation() -> None:
    sql = INIT_SQL.read_text(encoding="utf-8")
    assert re.search(r"(?i)EXEC\s+sys\.sp_cdc_enable_db\b", sql)
    enabled = re.findall(
        r"(?is)EXEC\s+sys\.sp_cdc_enable_table\b.*?@source_name\s*=\s*N?'(\w+)'", sql
    )
    assert len(enabled) >= 2, f"CDC on a couple of tables; got {enabled}"
    created = {t.lower() for t in re.findall(r"(?i)CREATE TABLE (?:dbo\.)?\[?(\w+)\]?", sql)}
    assert {t.lower() for t in enabled} <= created, "CDC is enabled on tables the script creates"
    assert re.search(r"(?i)SET\s+ALLOW_SNAPSHOT_ISOLATION\s+ON", sql)
    assert re.search(r"(?i)ALTER ROLE \[?db_datareader\]? ADD MEMBER", sql)
    assert re.search(r"(?i)GRANT SELECT ON SCHEMA::\[?cdc\]?", sql)
    # sqlcmd substitutes $(NAME) everywhere, comments included: a comment must not name one.
    comments = [line for line in sql.splitlines() if line.lstrip().startswith("--")]
    assert not [line for line in comments if "$(" in line]


# -- deploy/Dockerfile -----------------------------------------------------------------------------


def test_dockerfile_base_image() -> None:
    froms = [args for instruction, args in _dockerfile() if instruction == "FROM"]
    assert froms == ["python:3.11-slim-bookworm"]


def test_dockerfile_copy_sources_exist() -> None:
    missing = []
    for instruction, args in _dockerfile():
        if instruction not in ("COPY", "ADD"):
            continue
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        if args.lstrip().startswith("["):
            words = yaml.safe_load(args)
        for source in words[:-1]:  # the last word is the destination
            if not (REPO / source).exists():  # the build context is the repository root
                missing.append(source)
    assert not missing, f"COPY sources missing from the repository: {missing}"


def _apt_packages_of_setup() -> set[str]:
    text = SETUP_SH.read_text(encoding="utf-8")
    return {p for group in re.findall(r"need_apt\+=\(([^)]*)\)", text) for p in group.split()}


def test_dockerfile_installs_the_system_packages_of_setup_sh() -> None:
    installed: set[str] = set()
    for instruction, args in _dockerfile():
        if instruction == "RUN":
            for command in _commands(args):
                words = [w for w in command if "=" not in w or w.startswith("-")]
                if words[:2] == ["apt-get", "install"]:
                    installed |= {w for w in words[2:] if not w.startswith("-")}
    setup = _apt_packages_of_setup()
    assert setup, "scripts/setup.sh installs no apt package? (need_apt+=(...) not found)"
    stale = TEST_ONLY_APT_PACKAGES - setup
    assert not stale, f"TEST_ONLY_APT_PACKAGES names what setup.sh no longer installs: {stale}"
    assert installed == setup - TEST_ONLY_APT_PACKAGES, (
        f"deploy/Dockerfile installs {sorted(installed)}; scripts/setup.sh installs "
        f"{sorted(setup)} (of which {sorted(TEST_ONLY_APT_PACKAGES)} only for the tests)"
    )


def test_dockerfile_installs_the_project_with_the_pinned_dagster_libraries() -> None:
    args = _dockerfile_args()
    requirements: list[str] = []
    for instruction, text in _dockerfile():
        if instruction == "RUN":
            for command in _commands(_substitute(text, args)):
                if "pip" in command and "install" in command:
                    requirements += command[command.index("install") + 1 :]
    assert "." in requirements, "the image installs the project: pip install ."
    version = _pinned_dagster_libraries_version()
    for requirement in requirements:
        match = re.fullmatch(r"(dagster-[a-z0-9-]+)==(\S+)", requirement)
        if match:
            assert match.group(2) == version, f"{match.group(1)} must be {version}, as pinned"
    # deploy/dagster.yaml keeps the instance in PostgreSQL: the image needs dagster-postgres.
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    names = [re.split(r"[=<>~ ;\[]", r)[0] for r in [*dependencies, *requirements]]
    assert "dagster-postgres" in names, "dagster-postgres is neither a dependency nor installed"
    assert "dagster-k8s" in names, "the Helm chart's K8sRunLauncher needs dagster-k8s"


def test_dockerfile_default_command_is_the_code_location() -> None:
    cmds = [args for instruction, args in _dockerfile() if instruction == "CMD"]
    assert len(cmds) == 1
    argv = yaml.safe_load(cmds[0])
    assert argv[:3] == ["dagster", "api", "grpc"]
    assert _option(argv, "-m") == _dev_location()["module_name"]


# -- deploy/helm/values.yaml -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> dict[str, Any]:
    values = _yaml(HELM_VALUES)
    assert isinstance(values, dict)
    unknown = set(values) - CHART_KEYS
    assert not unknown, f"not keys of the dagster/dagster chart: {unknown}"
    return values


def test_helm_user_deployment(helm: dict[str, Any], production: ProjectConfig) -> None:
    user = helm["dagster-user-deployments"]
    assert user["enabled"] is True
    deployments = user["deployments"]
    assert len(deployments) == 1
    deployment = deployments[0]
    assert set(deployment) <= USER_DEPLOYMENT_KEYS, set(deployment) - USER_DEPLOYMENT_KEYS
    image = deployment["image"]
    assert image["repository"] and isinstance(image["repository"], str)
    assert image["tag"] and isinstance(image["tag"], str), "a fixed, unique tag per build"
    assert deployment["dagsterApiGrpcArgs"] == ["-m", _dev_location()["module_name"]]
    assert deployment["port"] == 4000
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": True}
    secret_names = [s["name"] for s in deployment.get("envSecrets") or []]
    assert secret_names, "the SQL Server password comes from a Secret (envSecrets)"
    env = {e["name"]: e.get("value") for e in deployment.get("env") or []}
    mounts = {m["mountPath"]: m["name"] for m in deployment.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in deployment.get("volumes") or []}
    config_dir = str(PurePosixPath(env["CDC_ASSETS_CONFIG"]).parent)
    assert "configMap" in volumes[mounts[config_dir]], "the configuration comes from a ConfigMap"
    storage = mounts[str(PurePosixPath(production.storage.base_path))]
    assert "persistentVolumeClaim" in volumes[storage], "the asset store is a shared volume"


def test_helm_range_runs_are_queued_two_per_source(helm: dict[str, Any]) -> None:
    assert helm["runLauncher"]["type"] == "K8sRunLauncher"
    coordinator = helm["dagsterDaemon"]["runCoordinator"]
    assert coordinator["enabled"] is True
    assert coordinator["type"] == "QueuedRunCoordinator"
    limits = coordinator["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    expected = {"key": RANGE_LANE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 2}
    assert expected in limits
    if DAGSTER_YAML.is_file():  # the compose stack's instance queues runs the same way
        instance = _yaml(DAGSTER_YAML)["run_coordinator"]["config"]
        assert instance["tag_concurrency_limits"] == limits


def test_helm_postgresql(helm: dict[str, Any]) -> None:
    postgresql = helm["postgresql"]
    assert set(postgresql) <= CHART_POSTGRESQL_KEYS, set(postgresql) - CHART_POSTGRESQL_KEYS
    if not postgresql["enabled"]:
        assert postgresql["postgresqlHost"], "an external PostgreSQL needs its host"
    if helm.get("generatePostgresqlPasswordSecret") is False:
        assert postgresql.get("postgresqlPassword", "") == "", "the password is in the Secret"
        assert helm["global"]["postgresqlSecretName"]
