"""Imports every task module, so that each ``@TASKS.register`` runs (``load_builtins`` imports this
module).

Modules whose names start with ``_`` and the helpers (base, features, members, data_needs, builtin)
register nothing; heavy tasks (Detectron2) register lazily by target and import their dependency
only inside ``run``. The ``tasks`` package itself imports nothing, so its torch-free parts
(``tasks.data_needs``, ``tasks.cards``) import cheaply.
"""

import importlib
import pkgutil

import tasks

_HELPERS = {"base", "features", "members", "data_needs", "builtin"}
for _info in sorted(pkgutil.iter_modules(tasks.__path__), key=lambda m: m.name):
    if not _info.name.startswith("_") and _info.name not in _HELPERS:
        importlib.import_module(f"tasks.{_info.name}")
