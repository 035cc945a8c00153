#!/usr/bin/env bash
# Fetches the jars Spark needs for Delta Lake (scripts/jars/pom.xml) from Maven Central into
# <python prefix>/share/cdc_assets/jars, where cdc_assets.spark.session looks for them, so Spark
# never downloads anything when it starts. Usage: scripts/install_jars.sh [python] [--runtime-only]
# (default .venv/bin/python). Run by scripts/setup.sh and deploy/Dockerfile (--runtime-only: no
# test-only jars in the image); safe to run twice.
# It also fetches hadoop-aws and the AWS SDK modules S3A uses (scripts/jars/s3/pom.xml, 14 MB)
# into .../jars-s3, which the session adds only for s3a:// storage, and Microsoft's JDBC driver
# (scripts/jars/jdbc/pom.xml) into .../jars-jdbc, for the tests that connect to the TDS server as
# JVM tools do (cdc_assets_tests/tds_server/test_jdbc.py), and Debezium's embedded engine with its
# SQL Server connector (scripts/jars/debezium/pom.xml, 36 MB) into .../jars-debezium, for the
# test and the benchmark that run Debezium against the served emulator.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${1:-.venv/bin/python}"
runtime_only="${2:-}"
prefix="$("$python" -c 'import sys; print(sys.prefix)')"

fetch() {  # fetch <pom> <target directory> <marker jar> [maven options]
  local pom="$1" target="$2" marker="$3"
  shift 3
  if [ -e "$target/$marker" ]; then
    return
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    echo "install_jars: Maven (mvn) is needed to fetch the jars; install it (apt-get install maven)" >&2
    exit 1
  fi
  echo "install_jars: fetching $(basename "$(dirname "$pom")") jars into $target"
  mkdir -p "$target"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$target" "$@"
}

fetch "$here/jars/pom.xml" "$prefix/share/cdc_assets/jars" delta-spark_4.2_2.13-4.4.0.jar \
  -DexcludeTransitive=true
fetch "$here/jars/s3/pom.xml" "$prefix/share/cdc_assets/jars-s3" hadoop-aws-3.5.0.jar
[ "$runtime_only" = "--runtime-only" ] && exit 0
fetch "$here/jars/jdbc/pom.xml" "$prefix/share/cdc_assets/jars-jdbc" mssql-jdbc-13.6.2.jre11.jar \
  -DexcludeTransitive=true
fetch "$here/jars/debezium/pom.xml" "$prefix/share/cdc_assets/jars-debezium" \
  debezium-connector-sqlserver-3.3.1.Final.jar -DincludeScope=runtime
