"""The Dagster layer: assets, partitions, the sync sensor, coverage checks and the IO manager.

Dagster code lives here only; it builds on :mod:`cdc_assets.spark` and :mod:`cdc_assets.sqlserver`.
"""
