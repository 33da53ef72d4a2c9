"""Feature extraction and the cell's feature cache for the built-in tasks: ``benchmark.api``'s
(benchmark/building_blocks/features.py, docs/protocols/evaluation.md §2.2), which plugin tasks use too:
``cached_features`` keeps one split's features per key in the task context's ``feature_cache``,
``encoder_features`` reads the cell's (train, test) features through it."""

from __future__ import annotations

from benchmark.api import cached_features, encoder_features, extract_features

__all__ = ["cached_features", "encoder_features", "extract_features"]
