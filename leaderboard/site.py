"""``build_site``: the one-call entry point — records → tables (``leaderboard.build``) → pages
(``leaderboard.pages``).

Its own module so that the build never imports the renderer (the renderer reads the build's types):
no import cycle. ``python -m leaderboard build``, ``python -m benchmark run --site`` and the tests
call it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from leaderboard.build import build_model
from leaderboard.pages import render_site
from leaderboard.site_config import load_site_config, load_tracks


def build_site(
    results_dirs: Iterable[Path | str],
    out_dir: Path | str,
    *,
    tracks_path: Path | None = None,
    references_dir: Path | None = None,
    repo_url: str | None = None,
) -> Path:
    """Build the static site from every record under ``results_dirs`` into ``out_dir``; returns
    index.html."""
    tracks = load_tracks(tracks_path) if tracks_path is not None else None
    config = load_site_config(tracks_path) if tracks_path is not None else None
    model = build_model(
        results_dirs, tracks=tracks, references_dir=references_dir, config=config, repo_url=repo_url
    )
    return render_site(model, Path(out_dir))


__all__ = ["build_site"]
