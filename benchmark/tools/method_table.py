"""Deprecated: moved to ``benchmark.commands.method_table`` (issue 49); this path works for one release
(0.2.x) and goes in 0.3. Importing it gives the new module; ``python -m benchmark.tools.method_table`` runs
it."""

from __future__ import annotations

import runpy
import sys
import warnings

NEW = "benchmark.commands.method_table"

warnings.warn(
    f"{__name__} moved to {NEW}; the old path goes in 0.3", DeprecationWarning, stacklevel=2
)
if __name__ == "__main__":
    runpy.run_module(NEW, run_name="__main__", alter_sys=True)
else:
    import benchmark.commands.method_table as _moved

    sys.modules[__name__] = _moved
