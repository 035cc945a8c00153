"""The session's Delta Lake jars: found where scripts/install_jars.sh puts them, one clear error
naming the command when they are not there (no download when Spark starts); what a Spark Connect
client sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.spark import session


def test_the_installed_delta_jars_are_on_spark_jars() -> None:
    conf = session.session_conf({"spark.jars": "/opt/extra.jar"})
    jars = conf["spark.jars"].split(",")
    assert [Path(j).name for j in jars[:2]] == list(session.DELTA_JARS)
    assert all(Path(j).is_file() for j in jars[:2])
    assert jars[2:] == ["/opt/extra.jar"]  # the user's own jars are kept, after ours
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert "spark.jars.packages" not in conf  # nothing is resolved at session start


def test_missing_jars_name_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(session.JARS_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(session.MissingJars, match=r"run bash scripts/install_jars.sh"):
        session.session_conf()


def test_s3_storage_needs_the_s3_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in session.DELTA_JARS:
        (jars / name).write_bytes(b"")
    monkeypatch.setenv(session.JARS_ENV, str(jars))
    assert len(session.delta_jars("/data/storage")) == 2  # local storage: no S3 jars needed
    with pytest.raises(session.MissingJars, match=r"needs hadoop-aws jars.*install_jars\.sh"):
        session.delta_jars("s3a://bucket/storage")


def test_a_spark_connect_client_sets_only_the_settings_a_session_may_change() -> None:
    options = session.session_options(
        remote="sc://127.0.0.1:15002", conf={"spark.sql.shuffle.partitions": "2", "spark.x": "1"}
    )
    assert options["spark.remote"] == "sc://127.0.0.1:15002"
    assert options["spark.sql.shuffle.partitions"] == "2"
    assert options["spark.sql.session.timeZone"] == "UTC"
    # the server has Delta's extension, jars and master already; setting them again is refused
    assert not {"spark.sql.extensions", "spark.jars", "spark.master", "spark.x"} & set(options)
