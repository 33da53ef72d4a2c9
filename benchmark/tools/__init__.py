"""Deprecated: ``benchmark.tools`` moved to ``benchmark.commands`` (issue 49). The documented paths
``benchmark.tools.check_method``, ``benchmark.tools.method_table`` and ``benchmark.tools.tuning``
still import (and ``python -m`` still runs them), with a DeprecationWarning, for one release (0.2.x);
they go in 0.3, with this package. No module lives here: :class:`_Moved` answers the three old
names with the moved modules (issue 58: no file name twice in benchmark/)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

MOVED = {
    f"{__name__}.{name}": f"benchmark.commands.{name}"
    for name in ("check_method", "method_table", "tuning")
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds an old ``benchmark.tools.<name>`` and loads it as the moved module itself (one module
    object under both names); ``get_code`` gives ``python -m`` the moved module's code."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname not in MOVED:
            return None
        warnings.warn(
            f"{fullname} moved to {MOVED[fullname]}; the old path goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the moved module ran when ``create_module`` imported it."""

    def get_code(self, fullname: str) -> CodeType | None:
        spec = importlib.util.find_spec(MOVED[fullname])
        assert spec is not None and isinstance(spec.loader, importlib.abc.InspectLoader)
        return spec.loader.get_code(MOVED[fullname])

    def get_source(self, fullname: str) -> str | None:
        return None


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.insert(0, _Moved())
