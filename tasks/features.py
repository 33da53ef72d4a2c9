"""Feature extraction for the built-in tasks: ``benchmark.api``'s (benchmark/toolkit/features.py,
docs/protocols/evaluation.md §2.2), which plugin tasks use too."""

from __future__ import annotations

from benchmark.api import cached_features, extract_features

__all__ = ["cached_features", "extract_features"]
