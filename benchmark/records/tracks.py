"""Leaderboard tracks: the ``Track`` dataclass, its strict loader, and the one rule of which records
a track admits.

Track definitions are data (``leaderboard/site_config.yaml``). The leaderboard build and ``benchmark
submit`` both decide membership with :meth:`Track.admits`, so the site and the submission check
cannot drift apart. Torch-free.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from benchmark.records.schema import ResultRecord


class TrackError(ValueError):
    pass


def eval_split_of(cell: Mapping[str, Any]) -> str:
    """The split a record's tasks scored on: "test", or "validation" for hyperparameter selection
    runs."""
    return str(((cell.get("dataset") or {}).get("params") or {}).get("eval_split", "test"))


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
    # a method whose runs every row is also compared with, seed by seed (leaderboard.margins), e.g.
    # no_pretrain
    baseline: str | None = None
    label: str = ""  # short name of the track's columns in its dataset's summary table, e.g. "kNN"
    # false: a pipeline check whose numbers are not a result (the smoke grid); the site never names
    # a leader for it
    result: bool = True
    # the grid whose settings the track ranks (benchmark/grids/NAME.yaml): submit requires every
    # record's cell, but for its method and seed, to be a cell of that grid (a plugin runs it with
    # ``run --grid NAME --add-method ITS_NAME``); None: no such check (the smoke track)
    grid: str | None = None
    # true: the track's cells fit the maintainer's CPU, and ``accept`` re-trains each in the box and
    # requires its final-state digest bit for bit (docs/integrity.md)
    reproduce: bool = False
    # the CPU kernels mode the track's cells must run in (re-training on another CPU is bit for bit
    # only in "portable" mode); None: any
    kernels: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", self.id):
            raise TrackError(f"track id {self.id!r} must be a lower-case slug")
        if self.min_seeds < 1:
            raise TrackError(f"track {self.id}: min_seeds must be >= 1")

    @property
    def short(self) -> str:
        """The column-group label of the dataset summary: ``label``, else the task's registry
        name."""
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

    def admits(self, record: ResultRecord) -> str | None:
        """None if ``record`` belongs on this track, else why not: its dataset, backbone and
        federation settings are the track's, it was scored on the test split (validation runs choose
        hyperparameters; they are never leaderboard numbers), and — unless it diverged, which is
        shown as such — it has a score for the track's task. Which card that score carries is
        checked where the card matters (a column never mixes cards)."""
        cell = dict(record.cell)
        if record.dataset != self.dataset:
            return f"dataset {record.dataset!r} is not the track's {self.dataset!r}"
        split = eval_split_of(cell)
        if split != "test":
            return f"scored on the {split} split (a hyperparameter-selection run, never a leaderboard number)"
        backbone = (cell.get("backbone") or {}).get("name")
        if self.backbone is not None and backbone != self.backbone:
            return f"backbone {backbone!r} is not the track's {self.backbone!r}"
        fl = dict(cell.get("fl") or {})
        for key, want in self.federation.items():
            if fl.get(key) != want:
                return f"fl.{key}={fl.get(key)!r} is not the track's {want!r}"
        if record.status == "ok" and record.score(self.task) is None:
            return f"no score for the track's task {self.task!r}"
        return None


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
            raise TrackError(
                f"{where}: tracks[{i}] has unknown keys {sorted(unknown)}; known: {sorted(known)}"
            )
        if not all(isinstance(item.get(k), str) for k in ("id", "dataset", "task")):
            raise TrackError(f"{where}: tracks[{i}] needs string id, dataset and task")
        min_seeds = item.get("min_seeds", 3)
        if not isinstance(min_seeds, int) or isinstance(min_seeds, bool):
            raise TrackError(f"{where}: tracks[{i}].min_seeds must be a positive integer")
        for key in ("result", "reproduce"):
            if not isinstance(item.get(key, key == "result"), bool):
                raise TrackError(f"{where}: tracks[{i}].{key} must be true or false")
        if item.get("kernels") not in (None, "portable", "native"):
            raise TrackError(f"{where}: tracks[{i}].kernels must be portable or native")
        try:
            out.append(Track(**{**item, "federation": dict(item.get("federation") or {})}))
        except TypeError as exc:
            raise TrackError(f"{where}: tracks[{i}]: {exc}") from None
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise TrackError(f"{where}: duplicate track ids")
    return out


def load_tracks(path: Path) -> list[Track]:
    path = Path(path)
    if not path.exists():
        raise TrackError(f"tracks file {path} does not exist")
    return parse_tracks(read_tracks_yaml(path), str(path))


def read_tracks_yaml(path: Path) -> Any:
    """A tracks file's YAML, bounded like a grid (issue 52: one nested 50,000 deep was a
    RecursionError): a regular file of at most 1 MB, nested at most 64 deep, at most 100,000 values
    with its aliases expanded, all checked before it is composed; TrackError (one line) otherwise."""
    from benchmark.core.bounded_yaml import check_expanded_size, check_grid_depth, read_grid_text
    from benchmark.core.config import ConfigError

    try:
        text = read_grid_text(Path(path), "tracks")
        check_grid_depth(text, f"tracks file {path}")
        raw = yaml.safe_load(text)
        check_expanded_size(raw, f"tracks file {path}")
    except ConfigError as exc:
        raise TrackError(str(exc)) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TrackError(f"tracks file {path} is not valid YAML: {problem}") from None
    return raw


def find_track(tracks: list[Track], track_id: str) -> Track:
    for t in tracks:
        if t.id == track_id:
            return t
    hint = difflib.get_close_matches(track_id, [t.id for t in tracks], n=1)
    raise TrackError(
        f"unknown track {track_id!r}."
        + (f" Did you mean {hint[0]!r}?" if hint else "")
        + f" Known: {', '.join(t.id for t in tracks)}"
    )


def track_lines(tracks: list[Track]) -> list[str]:
    """One line per track, ``ID  title (dataset, task, card)``: what ``python -m benchmark list
    tracks`` and ``python -m leaderboard list tracks`` print (one function, so the two listings
    cannot drift apart)."""
    return [f"{t.id:32s} {t.title} ({t.dataset}, {t.task}, {t.card or 'any card'})" for t in tracks]


__all__ = [
    "Track",
    "TrackError",
    "eval_split_of",
    "find_track",
    "load_tracks",
    "parse_tracks",
    "track_lines",
]
