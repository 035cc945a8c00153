"""cdc_assets: SQL Server Change Data Capture as Dagster software-defined assets on Spark."""

__version__ = "0.1.0"
