"""Scripts as ``sqlcmd -i`` runs them, through ``cdc-assets emulator sql``: GO-separated batches,
scripting variables, ``:on error``; the compose stack's ``deploy/sqlserver/init.sql`` runs on the
emulator unchanged (twice: every step checks before it acts), and leaves what it promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.cli import main
from cdc_assets.emulator.batches.script import ScriptError, parse_script

INIT_SQL = Path(__file__).resolve().parents[2] / "deploy" / "sqlserver" / "init.sql"


def test_parse_script_splits_at_go_and_substitutes_variables() -> None:
    script = parse_script(
        ":setvar table orders\nSELECT 1\ngo\nSELECT '$(table)', '$(who)'\nGO 3 -- thrice\n"
        "SELECT N'GO'\n:on error ignore\n",
        {"who": "me"},
        environ={"TABLE": "ignored: :setvar comes first"},
    )
    assert [(b.text.strip(), b.count) for b in script.batches] == [
        ("SELECT 1", 1),
        ("SELECT 'orders', 'me'", 3),
        ("SELECT N'GO'", 1),
    ]
    assert script.on_error == "ignore"
    with pytest.raises(ScriptError, match="'nope' scripting variable not defined"):
        parse_script("SELECT '$(nope)'", environ={})
    with pytest.raises(ScriptError, match="':r' is not supported"):
        parse_script(":r other.sql\nGO")


def _principals(path: Path) -> tuple[list[str], list[str], int]:
    with emulator.connect(path, autocommit=True) as conn:
        logins = [r[0] for r in conn.execute("SELECT name FROM sys.server_principals")]
        users = [r[0] for r in conn.execute("SELECT name FROM sys.database_principals")]
        member = conn.execute("SELECT IS_ROLEMEMBER(N'db_datareader', N'cdc_assets')").fetchone()
    return logins, users, member[0]


def test_init_sql_runs_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_ASSETS_DB_PASSWORD", "Secret-pw-123")
    path = tmp_path / "shop.db"  # the database the script makes is the emulator's one
    for _ in range(2):
        assert main(["emulator", "sql", str(path), str(INIT_SQL)]) == 0
        out = capsys.readouterr().out
        assert "init.sql: database shop ready" in out and "Msg " not in out
        assert "Secret-pw-123" not in out
    with emulator.connect(path, autocommit=True) as conn:
        info = conn.execute(
            "SELECT snapshot_isolation_state_desc, is_cdc_enabled FROM sys.databases "
            "WHERE database_id = DB_ID()"
        ).fetchone()
        assert tuple(info) == ("ON", True)
        established = conn.execute(
            "SELECT capture_instance FROM cdc.change_tables WHERE start_lsn IS NOT NULL "
            "ORDER BY capture_instance"
        ).fetchall()
        assert [r[0] for r in established] == ["dbo_customers", "dbo_orders"]
        assert conn.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] == 3
    logins, users, member = _principals(path)
    assert "cdc_assets" in logins and "cdc_assets" in users and member == 1


def test_a_failing_batch_stops_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fails.sql"
    script.write_text(
        "PRINT 'one'\nGO\nRAISERROR ('stop here: %s', 16, 2, 'bad') \nGO\nPRINT 'never'\nGO\n"
    )
    assert main(["emulator", "sql", str(tmp_path / "x.db"), str(script)]) == 1
    out = capsys.readouterr().out
    assert "one" in out and "never" not in out
    assert "Msg 50000, Level 16, State 2, line 3: stop here: bad" in out


def test_principal_errors_are_sql_servers(conn: emulator.Connection) -> None:
    conn.execute("CREATE LOGIN [app] WITH PASSWORD = N'x-Secret-1'")
    with pytest.raises(emulator.ProgrammingError, match=r"\(15025\)"):
        conn.execute("CREATE LOGIN app WITH PASSWORD = N'x-Secret-1'")
    with pytest.raises(emulator.ProgrammingError, match=r"\(15151\)"):
        conn.execute("ALTER LOGIN nobody WITH PASSWORD = N'x-Secret-1'")
    with pytest.raises(emulator.ProgrammingError, match=r"\(15007\)"):
        conn.execute("CREATE USER u FOR LOGIN nobody")
    conn.execute("CREATE USER app FOR LOGIN app")
    with pytest.raises(emulator.ProgrammingError, match=r"\(15023\)"):
        conn.execute("CREATE USER app")
    assert conn.execute("SELECT DATABASE_PRINCIPAL_ID(N'app')").fetchone()[0] >= 5
    assert conn.execute("SELECT IS_ROLEMEMBER(N'db_datawriter', N'app')").fetchone()[0] == 0
    conn.execute("ALTER ROLE db_datawriter ADD MEMBER app")
    assert conn.execute("SELECT IS_ROLEMEMBER(N'db_datawriter', N'app')").fetchone()[0] == 1
    conn.execute("GRANT SELECT ON SCHEMA::[cdc] TO [app]")  # accepted; nothing is enforced
    conn.execute("USE msdb")
    assert conn.execute("SELECT DATABASE_PRINCIPAL_ID(N'app')").fetchone()[0] is None
    with pytest.raises(emulator.ProgrammingError, match=r"\(911\)"):
        conn.execute("USE otherdb")
