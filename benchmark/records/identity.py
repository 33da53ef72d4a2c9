"""Content identity of cells, torch-free: ``cell_id = sha256(canonical_json(cell))[:16]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.core.canonical import short_digest


def cell_id_of(cell: Mapping[str, Any]) -> str:
    return short_digest(dict(cell))


def pretrain_key_of(
    cell: Mapping[str, Any], export_params: tuple[str, ...] | frozenset[str] = ()
) -> str:
    """The key of the shared pre-training folder: the cell without its tasks and without the method
    parameters that only choose what is exported for evaluation (``export_params``, e.g. FeatARC's
    ``report_model``)."""
    body = {k: v for k, v in cell.items() if k != "tasks"}
    if export_params and isinstance(body.get("method"), Mapping):
        method = dict(body["method"])
        method["params"] = {
            k: v for k, v in dict(method.get("params", {})).items() if k not in export_params
        }
        body["method"] = method
    return short_digest(body)
