"""Development and operations tooling, outside the product: the local stack (`devstack`),
the benchmarks (`bench`), the fault campaign (`chaos`) and the load generator (`loadgen`).

Nothing in `jobsvc`, the workers, `coordination` or the client imports from here, and the
application image does not ship it (tests/unit/test_layers.py checks the first).
"""
