"""Named tensors of modules: the harness's own functions (``benchmark.tensors``), offered to every
method through ``benchmark.api``; kept here so the built-in methods' imports read as before."""

from benchmark.api import (
    BN_TYPES,
    bn_tensor_names,
    load_tensors,
    reset_num_batches,
    select,
    tensors_of,
)

__all__ = [
    "BN_TYPES",
    "bn_tensor_names",
    "load_tensors",
    "reset_num_batches",
    "select",
    "tensors_of",
]
