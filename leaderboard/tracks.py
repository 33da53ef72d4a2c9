"""Track definitions are data (``tracks.yaml``); this module holds the ``Track`` dataclass and its strict loader."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

DEFAULT_TRACKS = Path(__file__).with_name("tracks.yaml")


class TrackError(ValueError):
    pass


@dataclass(frozen=True, kw_only=True)
class Track:
    id: str  # slug, used in file names
    title: str
    dataset: str  # ResultRecord.dataset
    task: str  # TaskScores.task (the task's registry name)
    card: str | None = None  # ProtocolCard.name, e.g. "knn@v1"
    card_id: str | None = None  # pin one card_id when a card name has several settings
    federation: Mapping[str, Any] = field(default_factory=dict)  # subset of cell["fl"]
    backbone: str | None = None  # cell["backbone"]["name"], when the track is about one backbone
    min_seeds: int = 3
    description: str = ""
    # a method whose runs every row is also compared with, seed by seed (leaderboard.margins), e.g. no_pretrain
    baseline: str | None = None
    label: str = ""  # short name of the track's columns in its dataset's summary table, e.g. "kNN"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", self.id):
            raise TrackError(f"track id {self.id!r} must be a lower-case slug")
        if self.min_seeds < 1:
            raise TrackError(f"track {self.id}: min_seeds must be >= 1")

    @property
    def short(self) -> str:
        """The column-group label of the dataset summary: ``label``, else the task's registry name."""
        return self.label or self.task

    @property
    def task_family(self) -> str:
        """The card family used to match paper-reported numbers (``linear@v1`` → ``linear``)."""
        return re.split(r"[/@]", self.card, maxsplit=1)[0] if self.card else self.task

    def matches_cell(self, dataset: str, fl: Mapping[str, Any], backbone: str | None) -> bool:
        if dataset != self.dataset:
            return False
        if self.backbone is not None and backbone != self.backbone:
            return False
        return all(fl.get(k) == v for k, v in self.federation.items())


def parse_tracks(raw: Any, where: str = "<memory>") -> list[Track]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tracks"), list):
        raise TrackError(f"{where}: expected a mapping with a 'tracks' list")
    known = {f.name for f in fields(Track)}
    out: list[Track] = []
    for i, item in enumerate(raw["tracks"]):
        if not isinstance(item, Mapping):
            raise TrackError(f"{where}: tracks[{i}] must be a mapping")
        unknown = set(item) - known
        if unknown:
            raise TrackError(f"{where}: tracks[{i}] has unknown keys {sorted(unknown)}; known: {sorted(known)}")
        try:
            out.append(Track(**{**item, "federation": dict(item.get("federation") or {})}))
        except TypeError as exc:
            raise TrackError(f"{where}: tracks[{i}]: {exc}") from None
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise TrackError(f"{where}: duplicate track ids")
    return out


def load_tracks(path: Path | None = None) -> list[Track]:
    path = Path(path) if path is not None else DEFAULT_TRACKS
    return parse_tracks(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


@dataclass(frozen=True, kw_only=True)
class SiteConfig:
    """Site-wide settings, from the ``site:`` mapping of tracks.yaml (data, like the tracks).

    ``reference_points``: methods shown as labelled rows apart from the ranking (random init, central training,
    ...), each with a one-line description. ``repo_url``: the repository's web address; when set, commits and
    sources become links (``python -m leaderboard build --repo-url`` overrides it)."""

    reference_points: Mapping[str, str] = field(default_factory=dict)
    repo_url: str = ""

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
        raise TrackError(f"{where}: site has unknown keys {sorted(unknown)}; known: {sorted(known)}")
    points = site.get("reference_points") or {}
    if not isinstance(points, Mapping) or not all(isinstance(k, str) for k in points):
        raise TrackError(f"{where}: site.reference_points must map method names to descriptions")
    return SiteConfig(reference_points={k: str(v or "") for k, v in points.items()},
                      repo_url=str(site.get("repo_url") or ""))


def load_site_config(path: Path | None = None) -> SiteConfig:
    path = Path(path) if path is not None else DEFAULT_TRACKS
    return parse_site_config(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
