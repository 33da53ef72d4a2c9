"""The repository's paths, in one place: every module that needs a file of the source tree (the grid
files, the methods' README and versions lock, the results and manifests, the tracks) asks here
instead of climbing ``Path(__file__).parents``. Meaningful in a source checkout (an editable
install); an installed wheel has the package files (``GRIDS``) but no repository around them."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # benchmark/
REPO = PACKAGE.parent  # the repository: benchmark/, methods/, tasks/, leaderboard/, results/
GRIDS = PACKAGE / "grids"
RESULTS = REPO / "results"
METHODS_DIR = REPO / "methods"
TRACKS_FILE = REPO / "leaderboard" / "tracks.yaml"

__all__ = ["GRIDS", "METHODS_DIR", "PACKAGE", "REPO", "RESULTS", "TRACKS_FILE"]
