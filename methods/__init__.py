"""FSSL methods. Importing this package imports every module in it (one per method), so that each
``@METHODS.register`` decorator runs; files starting with ``_`` (shared maths) and ``base`` are
skipped."""

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_") and _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")
