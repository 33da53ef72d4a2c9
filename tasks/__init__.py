"""Downstream tasks. Importing this package imports every task module so that each ``@TASKS.register`` runs.
Modules whose names start with ``_`` and the helpers (base, features, members, data_needs) register nothing; heavy tasks
(Detectron2) register lazily by target and import their dependency only inside ``run``."""

import importlib
import pkgutil

_HELPERS = {"base", "features", "members", "data_needs"}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_") and _info.name not in _HELPERS:
        importlib.import_module(f"{__name__}.{_info.name}")
