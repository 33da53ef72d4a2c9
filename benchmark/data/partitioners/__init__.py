"""The partitioner catalogue (docs/protocols/partitioning.md §2). Importing this package registers
every partitioner.

One module per family; each partitioner is a frozen dataclass holding its parameters, registered in
``benchmark.contracts.registries.PARTITIONERS`` and called as ``partitioner(labels, num_clients,
seed) -> Partition``. Modifiers (``decssl_prefix``, ``subsample``) are the ``modifiers`` field of
every partitioner (modifiers.py).
"""

from benchmark.data.partitioners import (  # noqa: F401  (imported for registration)
    decssl,
    dirichlet,
    easyfl,
    flesd,
    iid,
    orchestra,
    quantity,
    shards,
)
from benchmark.data.partitioners.matched import label_matched_test
from benchmark.data.partitioners.modifiers import Modifier

__all__ = ["Modifier", "label_matched_test"]
