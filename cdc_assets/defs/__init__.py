"""The dg project's definitions folder: one folder per component instance (defs.yaml)."""
