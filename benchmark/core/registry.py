"""A small generic name → component registry (after lm-eval-harness and timm).

Components register next to their definition with a decorator; heavy optional components register
lazily as ``"pkg.mod:Attr"`` targets; out-of-tree packages register through an entry-point group.
Unknown names raise :class:`UnknownName` with a did-you-mean hint and the list of known names;
duplicates raise :class:`DuplicateName` (timm only warns; a silent override would change numbers):
two built-ins at import, and a name that two installed distributions register, wherever the name is
used, naming both (neither wins). A plugin that registers a built-in's name is refused instead, with
one warning on stderr naming its distribution, and the built-in is kept and used: an installed
package cannot disable or replace a built-in component.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(ValueError):
    """Base class of registry errors (a ValueError so the CLI reports it as bad input)."""


class PluginError(RegistryError):
    """An installed plugin cannot be used: its entry point fails to import, or what it names is
    refused (not a subclass of the registry's base, e.g. a plugin written for plugin API 1). Named
    with its reason; only what uses it fails."""


class UnknownName(RegistryError, KeyError):
    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateName(RegistryError):
    pass


BUILT_IN = "fssl-bench (built in)"


def entry_point_origin(ep: Any) -> str:
    """Who registers ``ep``: its distribution and version (and target), for a refusal that names
    both sides of a clash."""
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    version = getattr(dist, "version", None) if dist is not None else None
    who = f"{name} {version}" if name else "an installed distribution"
    return f"{who} ({ep.value})"


# How long importing one plugin component may take (seconds; ``$FSSL_PLUGIN_IMPORT_TIMEOUT``): a
# plugin that loops at import hung accept (issue 44). Enforced with a real-time interval timer in the
# main thread (the CLI's); a plugin imported elsewhere (a Ray or SLURM worker) has no limit.
PLUGIN_IMPORT_TIMEOUT_S = 60.0


# id(component) -> the module an installed plugin's entry point imported it from (provenance reads it:
# a class that sets __module__ = "methods.x" does not become built-in code, issue 44)
_LOADED_FROM: dict[int, str] = {}


def loaded_from(obj: Any) -> str | None:
    """The module an entry point of an installed distribution imported ``obj`` from, or None."""
    return _LOADED_FROM.get(id(obj))


# Set while ``accept`` runs (``plugin_code_refused``): "kind:name" of the plugin components it may
# still load in its own process (a plugin partitioner under --unboxed); None when loads are free.
_PLUGIN_LOADS_ALLOWED: frozenset[str] | None = None


@contextmanager
def plugin_code_refused(allowed: Iterable[str] = ()) -> Iterator[None]:
    """Within the block, ``get`` of a component an installed plugin registered raises
    :class:`PluginError` instead of loading it (unless "kind:name" is ``allowed``): ``accept``
    runs a stranger's code only in the box, and a path that would still import it here is a
    refusal in one line, never a silent import (issue 52)."""
    global _PLUGIN_LOADS_ALLOWED
    before = _PLUGIN_LOADS_ALLOWED
    _PLUGIN_LOADS_ALLOWED = frozenset(allowed)
    try:
        yield
    finally:
        _PLUGIN_LOADS_ALLOWED = before


class PluginTimeout(Exception):
    """A plugin's import ran past :data:`PLUGIN_IMPORT_TIMEOUT_S`."""


def import_timeout() -> float:
    import os

    try:
        value = float(os.environ.get("FSSL_PLUGIN_IMPORT_TIMEOUT", PLUGIN_IMPORT_TIMEOUT_S))
    except ValueError:
        return PLUGIN_IMPORT_TIMEOUT_S
    return value if value > 0 else PLUGIN_IMPORT_TIMEOUT_S


def import_target(target: str) -> Any:
    """The object ``"pkg.mod:Attr"`` names, imported within :func:`import_timeout` seconds when
    called from the main thread (``signal.setitimer``: the import is interrupted between two of its
    Python instructions, or in a blocking call; a previous timer and handler are put back)."""
    import signal
    import threading

    module, _, attr = target.partition(":")

    def load() -> Any:
        loaded: Any = importlib.import_module(module)
        for part in attr.split("."):
            loaded = getattr(loaded, part)
        return loaded

    if threading.current_thread() is not threading.main_thread():
        return load()
    limit = import_timeout()

    def expired(signum: int, frame: Any) -> None:
        raise PluginTimeout(f"its import did not finish within {limit:g} s (it was stopped)")

    previous = signal.signal(signal.SIGALRM, expired)
    before = signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return load()
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before)
        signal.signal(signal.SIGALRM, previous)


class Registry(Generic[T]):
    """Name → component. ``get`` resolves aliases and lazy targets; ``names`` lists canonical
    names."""

    def __init__(
        self,
        kind: str,
        *,
        entry_point_group: str | None = None,
        base: type | None = None,
        explain: Callable[[str, Any], str | None] | None = None,
    ) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        # every component must subclass it (its declared capabilities have defaults there)
        self.base = base
        # a refusal more specific than "must subclass" (an older plugin API), or None
        self.explain = explain
        self._items: dict[str, T | None] = {}
        self._targets: dict[str, str] = {}
        self._aliases: dict[str, str] = {}
        # who registered each name (BUILT_IN, or an entry point's distribution), and the names two
        # of them registered: such a name is refused wherever it is used, naming both
        self._origin: dict[str, str] = {}
        self._clashes: dict[str, list[str]] = {}
        # plugin registrations refused because the name is built in: name -> their origins
        self._refused: dict[str, list[str]] = {}
        self._frozen = False
        self._plugins_loaded = False
        # called once before a name is reported unknown (benchmark.contracts.registries sets it to
        # load_builtins): code that never imported the built-ins (a plugin's own tests) still finds
        # them by name
        self.load_missing: Callable[[], None] | None = None

    def register(
        self, name: str, *, aliases: Sequence[str] = (), target: str | None = None
    ) -> Callable[[T], T]:
        """Register ``name`` (and ``aliases``); with ``target`` the object is imported on first
        ``get``."""
        if self._frozen:
            raise RegistryError(f"{self.kind} registry is frozen; cannot register {name!r}")
        for key in (name, *aliases):
            if key in self._items or key in self._aliases:
                if self._origin.get(key, BUILT_IN) == BUILT_IN:
                    raise DuplicateName(f"{self.kind} {key!r} is already registered")
                # installed plugins took this name before the built-ins were imported: the built-in
                # is kept, every plugin registration of the name refused
                for origin in self._clashes.pop(key, None) or [self._origin[key]]:
                    self._refuse(key, origin)
                self._items.pop(key, None)
                self._targets.pop(key, None)
        for key in (name, *aliases):
            self._origin[key] = BUILT_IN

        def add(obj: T) -> T:
            self._check_base(name, obj)
            self._items[name] = obj
            for alias in aliases:
                self._aliases[alias] = name
            if hasattr(obj, "__dict__") and not isinstance(obj, (str, bytes)):
                try:
                    if getattr(obj, "name", None) in (None, ""):
                        obj.name = name  # type: ignore[attr-defined]
                except (AttributeError, TypeError):
                    pass
            return obj

        if target is not None:
            self._targets[name] = target
            self._items[name] = None
            for alias in aliases:
                self._aliases[alias] = name
            return lambda obj: obj
        return add

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self.entry_point_group is None:
            return
        self._plugins_loaded = True
        seen: set[tuple[str, str]] = set()
        for ep in metadata.entry_points(group=self.entry_point_group):
            origin = entry_point_origin(ep)
            if (ep.name, origin) in seen:  # one distribution found twice on the path
                continue
            seen.add((ep.name, origin))
            if ep.name in self._items or ep.name in self._aliases:
                if self._origin.get(ep.name, BUILT_IN) == BUILT_IN:
                    self._refuse(ep.name, origin)
                else:
                    self._clash(ep.name, origin)
                continue
            self._targets[ep.name] = ep.value
            self._items[ep.name] = None
            self._origin[ep.name] = origin

    def _refuse(self, name: str, origin: str) -> None:
        """``origin`` (a plugin) registers a built-in name: the built-in is kept and used, the
        plugin's registration refused with one warning naming its distribution."""
        refused = self._refused.setdefault(name, [])
        if origin in refused:
            return
        refused.append(origin)
        print(
            f"warning: {self.kind} {name!r} is built in; the registration by {origin} is refused "
            "and the built-in is used (a plugin cannot take a built-in name: rename it)",
            file=sys.stderr,
        )

    def refused(self) -> dict[str, list[str]]:
        """Built-in names that installed plugins also register -> those plugins' origins (refused;
        the built-in is used)."""
        self._load_plugins()
        return {k: list(v) for k, v in self._refused.items()}

    def _clash(self, name: str, origin: str) -> None:
        """``origin`` registers ``name`` too: neither wins silently (a different method would run)."""
        first = self._origin.get(name, BUILT_IN)
        self._clashes.setdefault(name, [first])
        if origin not in self._clashes[name]:
            self._clashes[name].append(origin)

    def clash(self, name: str) -> str | None:
        """Why ``name`` cannot be used (two registrations), or None."""
        self._load_plugins()
        who = self._clashes.get(name) or self._clashes.get(self._aliases.get(name, ""))
        if not who:
            return None
        return (
            f"{self.kind} {name!r} is registered by both {' and '.join(who)}: neither is used; "
            "uninstall one of them"
        )

    def canonical(self, name: str) -> str:
        self._load_plugins()
        why = self.clash(name)
        if why:
            raise DuplicateName(why)
        if name in self._items:
            return name
        if name in self._aliases:
            return self._aliases[name]
        load, self.load_missing = self.load_missing, None
        if load is not None:
            load()
            return self.canonical(name)
        known = sorted(set(self._items) | set(self._aliases))
        hint = difflib.get_close_matches(name, known, n=1)
        msg = f"unknown {self.kind} {name!r}."
        if hint:
            msg += f" Did you mean {hint[0]!r}?"
        msg += f" Known: {', '.join(sorted(self._items))}"
        raise UnknownName(msg)

    def get(self, name: str) -> T:
        key = self.canonical(name)
        who = self._origin.get(key, BUILT_IN)
        allowed = _PLUGIN_LOADS_ALLOWED
        if allowed is not None and who != BUILT_IN and f"{self.kind}:{key}" not in allowed:
            raise PluginError(
                f"plugin {self.kind} {key!r} ({who}): accept does not run plugin code in its own "
                "process (it runs in the box)"
            )
        obj = self._items[key]
        if obj is None:
            target = self._targets[key]
            who = self._origin.get(key, BUILT_IN)
            where = target if who == BUILT_IN else who
            try:
                loaded: Any = import_target(target)
            # any failure of a plugin's import is reported the same way, SystemExit included (a
            # plugin that exits at import made accept exit 0 having done nothing); Ctrl-C is not
            # the plugin's and goes on
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                raise PluginError(
                    f"plugin {self.kind} {key!r} ({where}) cannot be loaded: "
                    f"{type(exc).__name__}: {str(exc)[:300]}"
                ) from None
            try:
                self._check_base(key, loaded)
            except RegistryError as exc:  # refused like a failed import: only its users fail
                raise PluginError(str(exc)) from None
            self._items[key] = obj = loaded
            if who != BUILT_IN:  # where it was loaded from, whatever __module__ it sets
                _LOADED_FROM[id(loaded)] = target.partition(":")[0]
        return obj  # type: ignore[return-value]

    def _check_base(self, name: str, obj: Any) -> None:
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            specific = self.explain(name, obj) if self.explain is not None else None
            if specific:
                raise RegistryError(specific)
            raise RegistryError(
                f"{self.kind} {name!r} must subclass {self.base.__module__}.{self.base.__name__} "
                f"(it declares the capabilities the harness relies on), got {obj!r}"
            )

    def names(self, pattern: str = "*") -> list[str]:
        self._load_plugins()
        return sorted(n for n in self._items if fnmatch.fnmatch(n, pattern))

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def freeze(self) -> None:
        self._frozen = True

    def origin(self, name: str) -> str | None:
        """Who registered ``name`` (``BUILT_IN``, or an entry point's distribution), read from the
        entry points' metadata without importing anything; None for an unknown name."""
        self._load_plugins()
        key = self._aliases.get(name, name)
        return self._origin.get(key) if key in self._items else None

    def entry_target(self, name: str) -> str | None:
        """The ``"pkg.mod:Attr"`` an installed plugin's entry point names for ``name``, read from
        the entry points' metadata without importing anything; None for a built-in or unknown
        name (``accept`` computes a plugin's provenance from it, benchmark.core.provenance)."""
        self._load_plugins()
        key = self._aliases.get(name, name)
        if self._origin.get(key, BUILT_IN) == BUILT_IN:
            return None
        return self._targets.get(key)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is registered: the built-ins and the entry points' metadata, nothing
        imported (a plugin's code runs only where it is loaded, ``get``)."""
        self._load_plugins()
        return isinstance(name, str) and (name in self._items or name in self._aliases)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._items)} items)"
