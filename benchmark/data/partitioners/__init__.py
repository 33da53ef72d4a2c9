"""The partitioner catalogue (docs/protocols/partitioning.md §2). Importing this package imports
every module in it (one per family; ``_`` files are shared helpers), so that each
``@PARTITIONERS.register`` decorator runs, as importing ``methods`` registers every method.

One module per family; each partitioner is a frozen dataclass holding its parameters, registered in
``benchmark.contracts.registries.PARTITIONERS`` and called as ``partitioner(labels, num_clients,
seed) -> Partition``. Modifiers (``decssl_prefix``, ``subsample``) are the ``modifiers`` field of
every partitioner (modifiers.py).
"""

import importlib
import pkgutil

from benchmark.data.partitioners.matched import label_matched_test
from benchmark.data.partitioners.modifiers import Modifier

__all__ = ["Modifier", "label_matched_test"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
