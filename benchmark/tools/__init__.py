"""Deprecated: ``benchmark.tools`` moved to ``benchmark.commands`` (issue 49). The documented paths
(``benchmark.tools.check_method``, ``benchmark.tools.method_table``, ``benchmark.tools.tuning``)
still import and run, with a DeprecationWarning, for one release (0.2.x); they go in 0.3."""
