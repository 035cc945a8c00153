"""JVM options of the tests' Spark processes."""

# A JVM that starts fast and does little work (C1 only, one GC thread): a test's driver, a
# Spark Connect server or a standalone cluster's daemons spend most of their life starting.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
