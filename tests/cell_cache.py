"""A cell the tests only need as material (a run folder to bundle, tamper with, submit or accept) is
run once per test session, keyed by its content, and copied into each fixture's own folder.

Before this, seven modules' ``run_root`` fixtures each re-ran the same smoke cell (issue 53). The
master copy lives beside pytest's base temporary folder, which pytest-xdist's workers share (their
own base folders are its children), behind a file lock, so a cell runs once for the whole session
however many workers ask for it; a worker that finds it half-written waits for the lock. Every
caller gets a private copy: a test that tampers with its folder cannot reach another's.

Tests of running itself (resume, skip, the launchers) call ``run_cell`` directly, never this.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmark.engine.runner import run_cell


def _cache_root(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    # under xdist every worker's base is <session base>/popen-gw<N>: the shared parent is the session's
    # (checked by name too: a pytest started inside a test inherits PYTEST_XDIST_WORKER, and its
    # base's parent is the folder of every session)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = base.parent if worker and base.name == f"popen-{worker}" else base
    root = shared / "cell-cache"
    root.mkdir(parents=True, exist_ok=True)
    return root


def content_key(cell: Any, device: str) -> str:
    """The cell's whole configuration (not only its id: every field a run reads) and the device."""
    blob = json.dumps({"cell": cell.to_dict(), "device": device}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def shared_once(key: str, factory: pytest.TempPathFactory, build: Callable[[Path], None]) -> Path:
    """The folder ``build(folder)`` fills, built once per session for ``key`` whichever worker asks
    first (the others wait for the lock, then find it). Returns the master: a caller that changes
    what it holds must copy it first (``cached_run`` does)."""
    cache = _cache_root(factory)
    master = cache / key
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not master.exists():
                partial = cache / f"{key}.partial-{os.getpid()}"
                shutil.rmtree(partial, ignore_errors=True)
                build(partial)
                partial.rename(master)  # whole or absent: a crash leaves no half master
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return master


def cached_run(
    cell: Any, dest: Path, factory: pytest.TempPathFactory, *, device: str = "cpu"
) -> Path:
    """Run ``cell`` once per session (by content) and copy its run folder into ``dest`` (merged
    with what ``dest`` holds, as a second ``run_cell`` into the same root would be). Returns
    ``dest``."""
    master = shared_once(
        content_key(cell, device), factory, lambda root: run_cell(cell, root, device=device)
    )
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(master, dest, dirs_exist_ok=True)
    return dest
