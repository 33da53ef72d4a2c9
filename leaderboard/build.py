"""The site's model: records → record frame (:mod:`leaderboard.loading`) → track tables
(:mod:`leaderboard.tables`) → per-dataset summaries (:mod:`leaderboard.summary`), gathered in one
:class:`SiteModel` (docs/design.md §1.2). Pure pandas; no HTML here.

``build_model(results_dirs)`` builds the :class:`SiteModel`; ``leaderboard.site.build_site`` hands
it to :mod:`leaderboard.pages` (the one-call entry point of ``python -m leaderboard build`` and the
quickstart).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.core.paths import REPO, RESULTS
from benchmark.records.carried_card_format import load_carried_cards
from benchmark.records.reference import ReferenceTable, load_references
from benchmark.records.schema import ResultRecord
from benchmark.records.store import Skipped
from leaderboard.loading import load_acceptances, load_all, records_frame
from leaderboard.margins import paired_margins
from leaderboard.site_config import SiteConfig, Track, load_site_config, load_tracks
from leaderboard.submitted import submitted_tasks
from leaderboard.summary import SummaryTable, build_summary, paper_pairs
from leaderboard.tables import TrackTable, build_track

DEFAULT_REFERENCES = RESULTS / "reference"


@dataclass
class SiteModel:
    records: list[tuple[Path, ResultRecord]]
    skipped: list[Skipped]
    frame: pd.DataFrame
    tracks: list[TrackTable]
    references: list[ReferenceTable]
    reference_errors: list[tuple[Path, str]]
    untracked: list[str]  # cell ids that no track shows
    sources: list[str] = field(default_factory=list)  # the results folders given
    repo: Path = REPO
    config: SiteConfig = field(default_factory=SiteConfig)
    # one per dataset with a non-empty track
    summaries: list[SummaryTable] = field(default_factory=list)
    # track id → ours beside the paper's
    pairs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    build: dict[str, str] = field(default_factory=dict)  # date, commit, repo_url (see build_info)
    # cell_id → verified acceptance
    acceptances: dict[str, dict[str, Any]] = field(default_factory=dict)
    # plugin tasks' scores under the cards accepted bundles carried, unranked (leaderboard.submitted)
    submitted: list[dict[str, Any]] = field(default_factory=list)

    def record(self, cell_id: str) -> ResultRecord | None:
        for _, r in self.records:
            if r.cell_id == cell_id:
                return r
        return None

    def cell_tracks(self) -> dict[str, list[tuple[TrackTable, str]]]:
        """cell_id → the tracks showing it, each with the entry (table row) it counts in."""
        out: dict[str, list[tuple[TrackTable, str]]] = {}
        for tt in self.tracks:
            for ids, entry in zip(tt.table["cell_ids"], tt.table["entry_id"]):
                for c in ids or []:
                    out.setdefault(c, []).append((tt, entry))
        return out


def build_info(repo: Path, repo_url: str = "") -> dict[str, str]:
    """When and from which commit the site was built. ``SOURCE_DATE_EPOCH`` (the reproducible-builds
    convention) pins the date; the commit is the checkout's HEAD, "unknown" outside git."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.fromtimestamp(int(epoch), tz=timezone.utc)
        if epoch and epoch.isdigit()
        else datetime.now(tz=timezone.utc)
    )
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return {
        "date": when.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": sha or "unknown",
        "repo_url": repo_url.rstrip("/"),
    }


def build_model(
    results_dirs: Iterable[Path | str],
    *,
    tracks: Sequence[Track] | None = None,
    references_dir: Path | None = None,
    config: SiteConfig | None = None,
    repo_url: str | None = None,
) -> SiteModel:
    results_dirs = list(results_dirs)
    config = config if config is not None else load_site_config()
    records, skipped = load_all(results_dirs)
    acceptances, bad_acceptances = load_acceptances(results_dirs, records)
    cards, bad_cards = load_carried_cards(results_dirs)
    skipped = (
        skipped + bad_acceptances + [Skipped(p, f"card ignored: {why}") for p, why in bad_cards]
    )
    frame = records_frame(records, config.reference_points, acceptances)
    tracks = list(tracks) if tracks is not None else load_tracks()
    ref_tables, ref_errors = load_references(
        references_dir if references_dir is not None else DEFAULT_REFERENCES,
        plugins=references_dir is None,
    )  # the default site also shows installed plugins' tables
    refs = [v for t in ref_tables for v in t.values]
    built = [build_track(frame, t, refs, config.margin_baselines) for t in tracks]
    shown = set().union(*(t.cell_ids for t in built)) if built else set()
    untracked = sorted({r.cell_id for _, r in records} - shown)
    return SiteModel(
        records,
        skipped,
        frame,
        built,
        ref_tables,
        ref_errors,
        untracked,
        sources=[str(d) for d in results_dirs],
        config=config,
        summaries=build_summaries(frame, built, config),
        pairs={t.track.id: paper_pairs(t) for t in built},
        build=build_info(REPO, repo_url if repo_url is not None else config.repo_url),
        acceptances=acceptances,
        submitted=submitted_tasks(records, cards, acceptances),
    )


def build_summaries(
    frame: pd.DataFrame, tracks: Sequence[TrackTable], config: SiteConfig
) -> list[SummaryTable]:
    """One summary table per dataset that has a non-empty track, in the order tracks.yaml names the
    datasets."""
    row_configs = dict(zip(frame["row_key"], frame["row_config"])) if not frame.empty else {}
    datasets = list(dict.fromkeys(tt.track.dataset for tt in tracks if not tt.table.empty))
    return [
        build_summary(
            d,
            [tt for tt in tracks if tt.track.dataset == d],
            row_configs,
            list(config.reference_points),
        )
        for d in datasets
    ]


def margins_from_dirs(results: Sequence[Any], *, task: str, baseline: str) -> pd.DataFrame:
    """Per-seed paired margins over ``baseline`` of every record under ``results`` (``leaderboard
    margins``)."""
    records, _ = load_all(list(results))
    return paired_margins(records_frame(records), task=task, baseline=baseline)
