#!/usr/bin/env bash
# Installs what cdc_assets needs on a fresh Debian machine: the ODBC driver manager that the
# pyodbc wheel links against (plus FreeTDS, and what Microsoft's ODBC Driver 18 wheel needs),
# Java 17 for Spark (and its javac for a test program), Maven (fetches the Delta Lake jars and the
# JDBC driver the tests use at install time, scripts/install_jars.sh), PostgreSQL (the tests start
# a throwaway server to check the production instance, deploy/dagster.yaml), Chromium (the browser
# test of the Dagster UI), and a .venv with the project.
# Safe to run twice: every step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# (grep without -q: with pipefail, grep -q leaving early can kill ldconfig with SIGPIPE and fail
# the check, so a present library would be installed again)
ldconfig -p | grep 'libodbc.so.2' >/dev/null || need_apt+=(unixodbc)
[ -e /usr/lib/x86_64-linux-gnu/odbc/libtdsodbc.so ] || [ -e /usr/lib/aarch64-linux-gnu/odbc/libtdsodbc.so ] \
  || need_apt+=(tdsodbc)
# Microsoft ODBC Driver 18 (the PyPI wheel mssql-python-odbc) needs libltdl and Kerberos/GSSAPI;
# the TDS server makes its TLS certificate with the openssl command.
ldconfig -p | grep 'libltdl.so.7' >/dev/null || need_apt+=(libltdl7)
ldconfig -p | grep 'libgssapi_krb5.so.2' >/dev/null || need_apt+=(libgssapi-krb5-2)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
if ! command -v java >/dev/null 2>&1 || ! java -version 2>&1 | grep -E 'version "(1[7-9]|2[0-9])' >/dev/null; then
  need_apt+=(openjdk-17-jre-headless)
fi
# javac compiles the small JDBC program the TDS server tests run (cdc_assets_tests/support/jdbc)
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
# Debian keeps initdb and pg_ctl in /usr/lib/postgresql/<version>/bin, outside PATH.
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || need_apt+=(postgresql)
# The browser test drives Debian's Chromium through Playwright (never a downloaded browser).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
echo "setup: installing the project into .venv"
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
bash scripts/install_jars.sh .venv/bin/python
# The dbt example's manifest (dbt parse, offline), so no code location load pays for it.
.venv/bin/python -m cdc_assets.dagster.dbt_models
echo "setup: done"
