"""The client's local loop: the harness's own ``benchmark.local_train``, offered to every method
through ``benchmark.api``; kept here so the built-in methods' imports read as before."""

from benchmark.api import IndexView, LocalStats, run_local_epochs

__all__ = ["IndexView", "LocalStats", "run_local_epochs"]
