"""Projection and prediction heads built from block lists (lightly ``heads.py`` shape).

``mlp_head`` lives in ``benchmark.blocks`` so that out-of-tree plugins reach it through
``benchmark.api``; it is re-exported here unchanged for the built-in methods."""

from __future__ import annotations

from benchmark.api import mlp_head

__all__ = ["mlp_head"]
