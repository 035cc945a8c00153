"""The machinery behind the definitions: the chain of partitions, each table's sync state,
the pool that runs tables side by side, the IO manager and the metadata the steps show."""
