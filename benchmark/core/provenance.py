"""Provenance of code that does not come from this repository: for a method or task provided by an
installed plugin, its distribution name and version, a digest of its source files and the VCS commit
where pip recorded one (``direct_url.json``). In-tree components need none: the record's git SHA and
the method's version (held to its code by methods/versions.lock.json) pin them. Torch-free."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

IN_TREE = ("benchmark", "methods", "tasks", "leaderboard")


def counted(rel: str) -> bool:
    """Whether a file of a plugin's package counts in its source digest: every file the package
    holds (code loaded from a data file, ``impl.txt``, changes the digest too, issue 52), but the
    bytecode caches Python writes beside it."""
    parts = rel.split("/")
    return "__pycache__" not in parts and not rel.endswith((".pyc", ".pyo"))


def source_files(module: Any) -> list[tuple[str, Path]]:
    """(path relative to the top-level package's parent, file) of every file (not only ``.py``:
    :func:`counted`) of the top-level package ``module`` belongs to, read from where Python imports
    it, so that an editable install (whose distribution lists no source files) and a regular one
    (whose files pip copied) give the same list."""
    top_name = module.__name__.split(".")[0]
    top = sys.modules.get(top_name) or importlib.import_module(top_name)
    roots = [Path(p) for p in getattr(top, "__path__", [])]
    if not roots:  # a single-module distribution
        file = Path(inspect.getfile(top))
        return [(file.name, file)]
    return _package_files(top_name, roots)


def source_digest(files: list[tuple[str, Path]]) -> str:
    """sha256 over each file's relative path and the sha256 of its bytes (the installed location is
    not part of it)."""
    return digest_of_sources((rel, path.read_bytes()) for rel, path in files)


def digest_of_sources(items: Iterable[tuple[str, bytes]]) -> str:
    """The source digest of (relative path, bytes) pairs, wherever they are read from: an installed
    package (``source_digest``) or the members of a wheel (``benchmark.submission.plugin_sources``)."""
    h = hashlib.sha256()
    for rel, data in sorted(items):
        h.update(rel.encode())
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def defining_module(obj: Any) -> Any:
    """The module ``obj``'s code was loaded from, decided by where it was loaded, not by its
    ``__module__`` (which a class sets as it likes: ``__module__ = "methods.fedavg_simclr"`` passed a
    plugin off as built-in code, issue 44): the module a plugin's entry point imported it from
    (``benchmark.core.registry.loaded_from``); else the module ``__module__`` names, if that module
    really holds ``obj`` under its qualified name; else the module of the file its own functions
    were compiled from; else None (nowhere known)."""
    from benchmark.core.registry import loaded_from

    entry = loaded_from(obj)
    if entry is not None and entry in sys.modules:
        return sys.modules[entry]
    named = inspect.getmodule(obj)
    if named is None or not isinstance(obj, type):
        return named
    held: Any = named
    for part in getattr(obj, "__qualname__", "").split("."):
        held = getattr(held, part, None)
    if held is obj:
        return named
    files = {
        Path(inspect.unwrap(f).__code__.co_filename).resolve()
        for f in (getattr(v, "__func__", v) for v in vars(obj).values())
        if inspect.isfunction(f) and hasattr(inspect.unwrap(f), "__code__")
    }
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if file and Path(file).resolve() in files:
            return mod
    return None


NOWHERE = "(not where its __module__ says; loaded from nowhere known)"


def component_provenance(obj: Any) -> dict[str, Any] | None:
    """None for an in-tree component; else where its code came from and a digest of it: the same for
    an editable and a regular install of the same sources. A ``file://`` URL (the author's disk) is
    not kept; a VCS URL and commit are."""
    module = defining_module(obj)
    if module is None and inspect.getmodule(obj) is not None:  # a __module__ that lies
        claimed = getattr(obj, "__module__", "?")
        return {
            "module": f"{claimed} {NOWHERE}",
            "distribution": None,
            "version": None,
            "source_digest": "unknown",
            "files": 0,
        }
    if module is None or module.__name__.split(".")[0] in IN_TREE:
        return None
    return _provenance(module.__name__, source_files(module))


def installed_provenance(registry: Any, name: str) -> dict[str, Any] | None:
    """What :func:`component_provenance` records for the component ``name`` of ``registry`` when a
    run imports it, computed **without importing anything** (``accept`` runs no plugin code in its
    own process, issue 52): the module its entry point names, the files of that module's top-level
    package found where Python would import them from (``importlib.util.find_spec`` of a top-level
    name runs none of the package's code), and the distribution metadata. None for a built-in
    component. ``ImportError`` (one line) when the entry point names a module that is not there."""
    target = registry.entry_target(name)
    if target is None:  # built in (or unknown: the caller asks the registry first)
        return None
    module = target.partition(":")[0]
    if module.split(".")[0] in IN_TREE:
        return None
    return _provenance(module, installed_files(module))


def installed_files(module: str) -> list[tuple[str, Path]]:
    """:func:`source_files` of the installed top-level package of ``module``, found without
    importing it: the same files a run digests (where the package's ``__path__`` points, or the
    module's own file for a single-module distribution)."""
    import importlib.util

    top_name = module.split(".")[0]
    if not top_name.isidentifier():
        raise ImportError(f"{module!r} is not a module name")
    try:
        spec = importlib.util.find_spec(top_name)
    except (ImportError, ValueError) as exc:
        raise ImportError(f"{top_name!r} cannot be found: {exc}") from None
    if spec is None:
        raise ImportError(f"no module {top_name!r} is installed")
    if spec.submodule_search_locations is None:  # a single-module distribution
        if not spec.origin or not Path(spec.origin).is_file():
            raise ImportError(f"{top_name!r} has no source file")
        file = Path(spec.origin)
        return [(file.name, file)]
    return _package_files(top_name, [Path(p) for p in spec.submodule_search_locations])


def _package_files(top_name: str, roots: list[Path]) -> list[tuple[str, Path]]:
    out = []
    for root in roots:
        for path in root.rglob("*"):
            rel = f"{top_name}/{path.relative_to(root).as_posix()}"
            if counted(rel) and path.is_file():
                out.append((rel, path))
    return sorted(out)


def _provenance(module: str, files: list[tuple[str, Path]]) -> dict[str, Any]:
    """The provenance of ``module`` (a plugin's), its top-level package's ``files`` digested."""
    top = module.split(".")[0]
    out: dict[str, Any] = {
        "module": module,
        "distribution": None,
        "version": None,
        "source_digest": source_digest(files),
        "files": len(files),
    }
    dists = metadata.packages_distributions().get(top, [])
    if not dists:  # imported from a path, not installed
        return out
    dist = metadata.distribution(dists[0])
    out.update(distribution=dist.metadata["Name"], version=dist.version)
    direct = dist.read_text("direct_url.json")
    if direct and len(direct) <= 1 << 16:
        try:
            info = json.loads(direct)
        except (ValueError, RecursionError):
            info = None
        if not isinstance(info, dict):
            return out
        url = info.get("url")
        if isinstance(url, str) and not url.startswith("file:"):
            out["url"] = url
        vcs = info.get("vcs_info")
        commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
        if isinstance(commit, str) and commit:
            out["commit"] = commit
    return out


def cell_provenance(method_cls: Any, task_classes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"method:NAME" | "task:NAME": provenance} for the cell's components that come from
    plugins."""
    out = {}
    for key, obj in {
        f"method:{method_cls.name}": method_cls,
        **{f"task:{name}": cls for name, cls in task_classes.items()},
    }.items():
        prov = component_provenance(obj)
        if prov is not None:
            out[key] = prov
    return out


__all__ = [
    "cell_provenance",
    "component_provenance",
    "digest_of_sources",
    "installed_files",
    "installed_provenance",
    "source_digest",
    "source_files",
]
