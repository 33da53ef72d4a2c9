"""Provenance of code that does not come from this repository: for a method or task provided by an installed plugin,
its distribution name and version, a digest of its source files and the VCS commit where pip recorded one
(``direct_url.json``). In-tree components need none: the record's git SHA and the method's version (held to its
code by methods/versions.lock.json) pin them. Torch-free."""

from __future__ import annotations

import hashlib
import inspect
import json
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
IN_TREE = ("benchmark", "methods", "tasks", "leaderboard")


def _source_digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def component_provenance(obj: Any) -> dict[str, Any] | None:
    """None for an in-tree component; else where its code came from and a digest of it."""
    module = inspect.getmodule(obj)
    if module is None or module.__name__.split(".")[0] in IN_TREE:
        return None
    top = module.__name__.split(".")[0]
    dists = metadata.packages_distributions().get(top, [])
    if not dists:  # imported from a path, not installed: the module file is all there is
        file = Path(inspect.getfile(module))
        return {"module": module.__name__, "distribution": None, "version": None,
                "source_digest": _source_digest([file]), "files": 1}
    dist = metadata.distribution(dists[0])
    files = [Path(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".py")]
    files = [f for f in files if f.is_file()]
    out: dict[str, Any] = {"module": module.__name__, "distribution": dist.metadata["Name"],
                           "version": dist.version, "source_digest": _source_digest(files), "files": len(files)}
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        out["url"] = info.get("url")
        commit = (info.get("vcs_info") or {}).get("commit_id")
        if commit:
            out["commit"] = commit
    return out


def cell_provenance(method_cls: Any, task_classes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"method:NAME" | "task:NAME": provenance} for the cell's components that come from plugins."""
    out = {}
    for key, obj in {f"method:{method_cls.name}": method_cls,
                     **{f"task:{name}": cls for name, cls in task_classes.items()}}.items():
        prov = component_provenance(obj)
        if prov is not None:
            out[key] = prov
    return out


__all__ = ["cell_provenance", "component_provenance"]
