"""The Dagster UI checked the way its users look at it: a real ``dagster dev`` on the demo source
(the project's workspace.yaml and definitions, sensor running), driven by headless Chromium
(Debian's, installed by ``make setup``) through Playwright.

One scenario, in the order a person meets it: the sensor snapshots the demo source; cleanup then
removes changes of ``dbo.orders`` that the next range needs (``on_gap: fail``), so that range's
coverage check fails and the sensor waits for a person. In the browser: the
lineage graph runs sqlserver -> cdc -> mirror -> analytics/daily_orders; the change log lists the
``snapshot`` and range partitions, a range's metadata (commit times, rows per operation, lag) and
its plots; the failed coverage check says what to do; the person does it
(launches the ``snapshot`` partition from the Materialize dialog) and the run succeeds.
Screenshots go to ``test-artifacts/browser/`` (``CDC_TEST_ARTIFACTS`` to change).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from cdc_assets import emulator
from cdc_assets.emulator.workload import Workload, create_demo_database
from cdc_assets_tests.support.dagster_dev import (
    ROOT,
    DagsterDev,
    dagster_dev,
    wait_for,
    write_project,
)

CHROMIUM = Path("/usr/bin/chromium")
# As the machine's probe starts it: no sandbox as root, no GPU, no calls home (refused here).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ORDERS = {
    "sqlserver": "sqlserver/demo/dbo/orders",
    "cdc": "cdc/demo/dbo/orders_changes",
    "mirror": "mirror/demo/dbo/orders_mirror",
    "downstream": "analytics/demo/daily_orders",
}


@pytest.fixture(scope="module")
def artifacts() -> Path:
    folder = Path(os.environ.get("CDC_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def page(artifacts: Path) -> Iterator[Any]:
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: run 'make setup' (scripts/setup.sh installs Debian's chromium)"
    )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def _runs(home: Path) -> list[Any]:
    with DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_runs())


def _run_with(dev: DagsterDev, status: DagsterRunStatus, partition: str | None = None) -> Any:
    """A sensor run in ``status`` (of ``partition``, or of a range when None); None if none."""
    for run in _runs(dev.home):
        key = run.tags.get("dagster/partition", "")
        wanted = key == partition if partition else key not in ("", "snapshot")
        if run.status == status and wanted:
            return run
    return None


def _write(db: Path, transactions: int) -> None:
    """Commit ``transactions`` workload transactions (not captured yet)."""
    conn = emulator.connect(str(db), autocommit=True)
    try:
        workload = Workload(conn, seed=transactions)  # continues on the existing tables
        for _ in range(transactions):
            workload.step()
    finally:
        conn.close()


def _cleanup_past_chain(db: Path, instance_name: str) -> None:
    """Capture everything, then let cleanup remove every change of ``instance_name`` below the
    new max LSN: the next range cannot be read for that table."""
    while emulator.scan(db) > 0:
        pass
    conn = emulator.connect(str(db), autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT sys.fn_cdc_get_max_lsn()")
        (maximum,) = cursor.fetchone()
        cursor.execute(
            "EXEC sys.sp_cdc_cleanup_change_table @capture_instance = ?, @low_water_mark = ?, "
            "@threshold = 5000",
            instance_name,
            maximum,
        )
    finally:
        conn.close()


def _graph_nodes(page: Any) -> dict[str, float]:
    """The lineage graph's asset nodes: role -> x position (left to right is upstream first)."""
    nodes = page.evaluate(
        """() => Array.from(document.querySelectorAll('foreignObject'))
            .filter(f => f.querySelector('[data-tooltip]') && f.querySelector('[aria-label]'))
            .map(f => ({
                x: parseFloat(f.getAttribute('x')),
                name: f.querySelector('[data-tooltip]').getAttribute('data-tooltip'),
                links: Array.from(f.querySelectorAll('a[href^="/assets/"]'))
                    .map(a => a.getAttribute('href').split('?')[0]),
                external: !!f.querySelector('[aria-label="source_asset"]'),
            }))"""
    )
    found: dict[str, float] = {}
    for node in nodes:
        links = " ".join(node["links"])
        if node["external"] and node["name"] == "orders":
            found["sqlserver"] = node["x"]
        # The box titles say the stage (the last key part): orders, orders_changes, orders_mirror.
        elif f"/assets/{ORDERS['cdc']}" in links and node["name"] == "orders_changes":
            found["cdc"] = node["x"]
        elif f"/assets/{ORDERS['mirror']}" in links and node["name"] == "orders_mirror":
            found["mirror"] = node["x"]
        elif node["name"] == "daily_orders":
            found["downstream"] = node["x"]
    return found


def _lineage(page: Any, dev: DagsterDev, depth: int) -> dict[str, float]:
    page.goto(
        f"{dev.url}/assets/{ORDERS['downstream']}?view=lineage&lineageScope=upstream"
        f"&lineageDepth={depth}"
    )
    page.get_by_text("daily_orders", exact=True).filter(visible=True).first.wait_for()
    expected = 1 + depth
    return wait_for(
        f"{expected} nodes in the upstream lineage at depth {depth}",
        lambda: (n := _graph_nodes(page)) and len(n) >= expected and n,
        60,
        dev.log,
    )


def test_the_ui_shows_lineage_partitions_a_failed_check_and_launches_a_snapshot(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    db = tmp_path / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    create_demo_database(conn, seed=3, rows_per_table=40, polling_interval=None)
    conn.close()
    while emulator.scan(db) > 0:
        pass
    config, home = write_project(
        tmp_path,
        db,
        sync={"sensor_interval_seconds": 1, "on_gap": "fail"},
        examples=["daily_orders"],
    )
    with dagster_dev(tmp_path, config, home) as dev:
        # The sensor (running by default) snapshots; then the workload writes and cleanup
        # removes what the next range needs of dbo.orders before the sensor's run reads it.
        wait_for(
            "the sensor's snapshot run",
            lambda: _run_with(dev, DagsterRunStatus.SUCCESS, "snapshot"),
            240,
            dev.log,
        )
        _write(db, 12)
        _cleanup_past_chain(db, "dbo_orders")
        failed = wait_for(
            "the range run refused by coverage",
            lambda: _run_with(dev, DagsterRunStatus.FAILURE),
            240,
            dev.log,
        )

        # 1. Lineage: each step upstream of the downstream asset adds the next node to the left.
        at_1 = _lineage(page, dev, 1)
        assert set(at_1) == {"downstream", "mirror"}, at_1
        at_2 = _lineage(page, dev, 2)
        assert set(at_2) == {"downstream", "mirror", "cdc"}, at_2
        at_3 = _lineage(page, dev, 3)
        assert set(at_3) == set(ORDERS), at_3
        assert at_3["sqlserver"] < at_3["cdc"] < at_3["mirror"] < at_3["downstream"], at_3
        # For the picture, a fresh browser context: the graph keeps its zoom per context and
        # fits the whole lineage only on a first visit.
        fresh = page.context.browser.new_context(viewport={"width": 1600, "height": 1000})
        try:
            picture = fresh.new_page()
            picture.goto(
                f"{dev.url}/assets/{ORDERS['downstream']}?view=lineage&lineageScope=upstream"
                "&lineageDepth=3"
            )
            picture.get_by_text("daily_orders", exact=True).filter(visible=True).first.wait_for()
            picture.wait_for_timeout(3000)
            picture.screenshot(path=artifacts / "01-lineage-sqlserver-cdc-mirror-daily_orders.png")
        finally:
            fresh.close()

        # 2. The change log's partitions: 'snapshot' and the ranges the sensor created.
        page.goto(f"{dev.url}/assets/{ORDERS['cdc']}?view=partitions")
        for key in ("snapshot", failed.tags["dagster/partition"]):
            # long keys are shown middle-truncated, whole in the title
            page.locator(f'[title="{key}"]').filter(visible=True).first.wait_for()
        page.screenshot(path=artifacts / "02-cdc-partitions.png")

        # The same range was read for the other tables: its metadata reads as a time range with
        # rows per operation and lag, and the numeric entries are plotted.
        customers = "cdc/demo/dbo/customers_changes"
        page.goto(f"{dev.url}/assets/{customers}?view=events")
        for text in ("lsn_range", "commit_time_range", "rows_insert", "lag_seconds"):
            page.get_by_text(text, exact=True).filter(visible=True).first.wait_for()
        page.screenshot(path=artifacts / "02b-range-metadata.png")
        page.goto(f"{dev.url}/assets/{customers}?view=overview")
        plots = page.get_by_role("button", name="Plots")
        plots.scroll_into_view_if_needed()
        plots.click()
        page.locator("canvas").filter(visible=True).first.wait_for()
        lag_plot = page.get_by_text("lag_seconds", exact=True).filter(visible=True).first
        lag_plot.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        page.screenshot(path=artifacts / "02c-plots.png")

        # 3. The failed coverage check, with what happened and what to do.
        page.goto(f"{dev.url}/assets/{ORDERS['cdc']}?view=checks")
        coverage = page.get_by_text("coverage", exact=True).filter(visible=True).first
        coverage.wait_for()
        coverage.click()
        page.get_by_text("Failed").filter(visible=True).first.wait_for()
        page.get_by_text("Re-snapshot the table", exact=False).filter(visible=True).first.wait_for()
        page.screenshot(path=artifacts / "03-coverage-check-failed.png")

        # 4. The fix, from the UI: materialize the 'snapshot' partition of the change log.
        before = {r.run_id for r in _runs(home)}
        page.goto(f"{dev.url}/assets/{ORDERS['cdc']}?view=partitions")
        page.get_by_role("button", name="Materialize…").click()
        dialog = page.get_by_role("dialog").first
        dialog.get_by_text("Select a partition or create one").click()
        menu = page.get_by_role("menu").last
        menu.get_by_text("snapshot", exact=True).filter(visible=True).click()
        page.keyboard.press("Escape")  # closes the partition menu (the top layer) only
        menu.wait_for(state="hidden")
        dialog.get_by_text("1 partition", exact=True).wait_for()
        page.screenshot(path=artifacts / "04-materialize-snapshot-dialog.png")
        dialog.get_by_role("button", name="Launch 1 run").click()
        launched = wait_for(
            "the run launched from the UI",
            lambda: next((r for r in _runs(home) if r.run_id not in before), None),
            60,
            dev.log,
        )
        assert launched.tags.get("dagster/partition") == "snapshot"
        assert "dagster/sensor_name" not in launched.tags
        finished = wait_for(
            "the UI's snapshot run to finish",
            lambda: next(
                (r for r in _runs(home) if r.run_id == launched.run_id and r.is_finished), None
            ),
            240,
            dev.log,
        )
        assert finished.status == DagsterRunStatus.SUCCESS, finished.status
        page.goto(f"{dev.url}/runs/{launched.run_id}")
        page.get_by_text("Success", exact=True).filter(visible=True).first.wait_for()
        page.screenshot(path=artifacts / "05-snapshot-run-succeeded.png")

        # 5. The mirror a person reads: columns with SQL Server and Spark types, owners, and
        # the freshness policy derived from the sync policy.
        page.goto(f"{dev.url}/assets/{ORDERS['mirror']}?view=overview")
        for text in (
            "stored as Spark decimal(19,4)",
            "data-platform",
            "Fails if more than 15 minutes since last materialization",
        ):
            page.get_by_text(text).filter(visible=True).first.wait_for()
        page.screenshot(path=artifacts / "06-mirror-overview.png", full_page=True)
    assert {p.name for p in artifacts.iterdir()} >= {
        "01-lineage-sqlserver-cdc-mirror-daily_orders.png",
        "03-coverage-check-failed.png",
        "05-snapshot-run-succeeded.png",
    }
