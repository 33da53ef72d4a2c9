"""Track definitions are data (``tracks.yaml``, next to this file). The ``Track`` type, its strict loader and its
``admits(record)`` rule live in ``benchmark.records.tracks``, which ``benchmark submit`` uses too."""

from __future__ import annotations

from pathlib import Path

from benchmark.records.tracks import Track, TrackError, eval_split_of, find_track, parse_tracks
from benchmark.records.tracks import load_tracks as _load_tracks

DEFAULT_TRACKS = Path(__file__).with_name("tracks.yaml")


def load_tracks(path: Path | None = None) -> list[Track]:
    return _load_tracks(Path(path) if path is not None else DEFAULT_TRACKS)


__all__ = ["DEFAULT_TRACKS", "Track", "TrackError", "eval_split_of", "find_track", "load_tracks", "parse_tracks"]
