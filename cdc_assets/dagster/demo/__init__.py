"""The demo's tools: a headless run of the sync, an in-process instance, the run-line display,
the demo instance's dagster.yaml."""
