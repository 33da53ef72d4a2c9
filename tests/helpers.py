"""Shared test helpers: the smallest real cells (digits 16×16, micro backbones, 2 clients).

The builder lives in :mod:`benchmark.conformance` (``check-method`` needs it outside the tests); re-exported here.
"""

from __future__ import annotations

from benchmark.conformance import SMOKE_OVERRIDES, smoke_cell, smoke_method_settings

__all__ = ["SMOKE_OVERRIDES", "smoke_cell", "smoke_method_settings"]
