"""The Dagster layer: the definitions a user sees, the machinery behind them, the demo's tools.

- this folder: the change-log and mirror assets, their checks, the sync sensor, the maintenance
  job, the example asset, the component and the builder that puts them together;
- :mod:`.sync`: the source and its tables, partitions, the chain of ranges, sync state, the
  table pool, the IO manager (imports nothing from this folder);
- :mod:`.demo`: the headless demo, the in-process instance, the run-line display.

Dagster code lives here only; it builds on :mod:`cdc_assets.spark` and :mod:`cdc_assets.sqlserver`.
"""
