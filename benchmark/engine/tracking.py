"""Experiment tracking: the only module that imports ``wandb`` (besides the collector). W&B is
transport and monitoring, never the source of truth (records are). Each cell is one W&B run whose id
is the cell id and whose group is the grid, so a requeued job continues the same run. The sealed
record and its score files travel as the run's files (``record.json``, ``scores/*.json``, …, under
the run's files folder: uploaded online, kept in ``wandb/offline-run-*/files/`` offline); the run
summary holds the headline scores and the record's digest. ``collect --from
wandb:ENTITY/PROJECT[/GROUP]`` (online) or ``collect --from PATH`` (offline folders) brings them
back."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from benchmark.records.schema import TrackingRef

_OFFLINE_NOTICE_SHOWN = False


class Tracker(Protocol):
    def start(
        self, cell_id: str, config: Mapping[str, Any], run_dir: Path, group: str | None, name: str
    ) -> None: ...
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def summary(self, values: Mapping[str, Any]) -> None: ...
    def ref(self) -> TrackingRef | None: ...
    def save_files(self, paths: list[Path], base: Path) -> None: ...
    def finish(self) -> TrackingRef | None: ...


class NullTracker:
    def start(self, cell_id, config, run_dir, group, name) -> None:
        pass

    def log(self, step, metrics) -> None:
        pass

    def summary(self, values) -> None:
        pass

    def ref(self) -> TrackingRef | None:
        return None

    def save_files(self, paths, base) -> None:
        pass

    def finish(self) -> TrackingRef | None:
        return None


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; otherwise online with an API key and offline without one."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        import netrc

        auth = netrc.netrc().authenticators("api.wandb.ai")
        if auth:
            return "online"
    except (OSError, netrc.NetrcParseError):
        pass
    return "offline"


class WandbTracker:
    def __init__(self, project: str = "fssl-bench", entity: str | None = None) -> None:
        self.project = os.environ.get("WANDB_PROJECT", project)
        self.entity = os.environ.get("WANDB_ENTITY", entity)
        self.run: Any = None
        self.mode = "disabled"

    def start(self, cell_id, config, run_dir, group, name) -> None:
        global _OFFLINE_NOTICE_SHOWN
        self.mode = wandb_mode()
        if self.mode == "disabled":
            return
        if self.mode == "offline" and not _OFFLINE_NOTICE_SHOWN:
            print(
                "W&B: no API key found; logging offline under each cell's wandb/ folder "
                "(`wandb sync` uploads later; --no-wandb turns it off).",
                file=sys.stderr,
            )
            _OFFLINE_NOTICE_SHOWN = True
        import wandb

        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            id=cell_id,
            name=name,
            group=group,
            config=dict(config),
            dir=str(run_dir),
            mode=self.mode,
            resume="allow",
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    def log(self, step, metrics) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=step)

    def summary(self, values) -> None:
        if self.run is not None:
            for key, value in values.items():
                self.run.summary[key] = value

    def ref(self) -> TrackingRef | None:
        if self.run is None:
            return None
        return TrackingRef(
            backend="wandb",
            entity=self.entity,
            project=self.project,
            run_id=self.run.id,
            url=getattr(self.run, "url", None) if self.mode == "online" else None,
            mode=self.mode,
        )

    def save_files(self, paths, base) -> None:
        """Copies (not links: the run folder must survive being moved) into the run's files folder,
        saved now."""
        if self.run is None:
            return
        files = Path(self.run.dir)
        for path in paths:
            dest = files / Path(path).relative_to(base)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            self.run.save(str(dest), base_path=str(files), policy="now")

    def finish(self) -> TrackingRef | None:
        if self.run is None:
            return None
        ref = self.ref()
        self.run.finish()
        self.run = None
        return ref
