"""Track definitions and site settings are data (``tracks.yaml``, next to this file). The ``Track``
type, its strict loader and its ``admits(record)`` rule live in ``benchmark.records.tracks``, which
``benchmark submit`` uses too; the site-wide settings (``SiteConfig``) are the leaderboard's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from benchmark.core.paths import TRACKS_FILE
from benchmark.records.tracks import (
    Track,
    TrackError,
    eval_split_of,
    find_track,
    parse_tracks,
    read_tracks_yaml,
)
from benchmark.records.tracks import load_tracks as _load_tracks

DEFAULT_TRACKS = TRACKS_FILE  # leaderboard/site_config.yaml: its one home is benchmark.core.paths


def load_tracks(path: Path | None = None) -> list[Track]:
    return _load_tracks(Path(path) if path is not None else DEFAULT_TRACKS)


@dataclass(frozen=True, kw_only=True)
class SiteConfig:
    """Site-wide settings, from the ``site:`` mapping of tracks.yaml (data, like the tracks).

    ``reference_points``: methods shown as labelled rows apart from the ranking (random init,
    central training, ...), each with a one-line description. ``repo_url``: the repository's web
    address; when set, commits and sources become links (``python -m leaderboard build --repo-url``
    overrides it). ``margin_baselines``: the reference points the index and the dataset summaries
    state every method's paired margin over (random init and calibrated random init), in that order.
    ``citation``: how to cite the benchmark (the footer shows it)."""

    reference_points: Mapping[str, str] = field(default_factory=dict)
    repo_url: str = ""
    margin_baselines: tuple[str, ...] = ()
    citation: str = ""

    def is_reference(self, method: str) -> bool:
        return method in self.reference_points


def parse_site_config(raw: Any, where: str = "<memory>") -> SiteConfig:
    site = (raw or {}).get("site") if isinstance(raw, Mapping) else None
    if site is None:
        return SiteConfig()
    if not isinstance(site, Mapping):
        raise TrackError(f"{where}: 'site' must be a mapping")
    known = {f.name for f in fields(SiteConfig)}
    unknown = set(site) - known
    if unknown:
        raise TrackError(
            f"{where}: site has unknown keys {sorted(unknown)}; known: {sorted(known)}"
        )
    points = site.get("reference_points") or {}
    if not isinstance(points, Mapping) or not all(isinstance(k, str) for k in points):
        raise TrackError(f"{where}: site.reference_points must map method names to descriptions")
    baselines = site.get("margin_baselines") or []
    if not isinstance(baselines, list) or not all(isinstance(b, str) for b in baselines):
        raise TrackError(f"{where}: site.margin_baselines must be a list of method names")
    return SiteConfig(
        reference_points={k: str(v or "") for k, v in points.items()},
        repo_url=str(site.get("repo_url") or ""),
        margin_baselines=tuple(baselines),
        citation=str(site.get("citation") or "").strip(),
    )


def load_site_config(path: Path | None = None) -> SiteConfig:
    path = Path(path) if path is not None else DEFAULT_TRACKS
    return parse_site_config(read_tracks_yaml(path), str(path))


__all__ = [
    "DEFAULT_TRACKS",
    "SiteConfig",
    "Track",
    "TrackError",
    "eval_split_of",
    "find_track",
    "load_site_config",
    "load_tracks",
    "parse_site_config",
    "parse_tracks",
]
