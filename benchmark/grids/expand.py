"""Grids as YAML: ``base`` + ``axes`` crossed − ``exclude`` → fully resolved, content-addressed
cells.

A grid file is flat (docs/design.md §3)::

    name: quickstart
    description: ...
    base: {dataset: digits, backbone: resnet_micro, fl: {...}, tasks: [knn, linear_probe], seed: 0}
    method_common: {batch_size: 64}        # applied to every method whose config has the field
    axes:
      method: [fedavg_simclr, {name: flesd, with: {public: {name: holdout, fraction: 0.1}}}]
      partition: [iid, {name: dirichlet, alpha: 0.1}]
    exclude: [{method: flesd, partition: iid}]
    smoke: true                            # optional: each method's smoke_settings (check-method's)

A string value is shorthand for ``{name: ...}``; ``with:`` sets other cell fields together with one
axis value. Every component's params are validated against its config dataclass (unknown keys and
wrong types are rejected) and filled with defaults, so the cell id covers the full configuration and
aliases never create two cells.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmark.contracts.cell import Cell
from benchmark.contracts.method import identity_version
from benchmark.contracts.registries import (
    BACKBONES,
    DATASETS,
    METHODS,
    PARTITIONERS,
    PUBLIC_SPLITS,
    TASKS,
    load_builtins,
)
from benchmark.contracts.specs import ComponentSpec, FLConfig
from benchmark.core.bounded_yaml import (  # noqa: F401 (re-exported: grids are read through here)
    MAX_GRID_BYTES,
    MAX_GRID_DEPTH,
    MAX_GRID_NODES,
    check_expanded_size,
    check_grid_depth,
    read_grid_text,
)
from benchmark.core.config import ConfigError, config_dict, from_mapping
from benchmark.core.paths import GRIDS
from benchmark.core.precision import PRECISIONS, supports
from benchmark.portable.mode import KERNELS

GRIDS_DIR = GRIDS
CELL_FIELDS = (
    "dataset",
    "backbone",
    "method",
    "partition",
    "partition_seed",
    "public",
    "fl",
    "seed",
    "tasks",
    "precision",
    "kernels",
)
GRID_KEYS = {
    "name",
    "description",
    "base",
    "axes",
    "exclude",
    "method_common",
    "budget",
    "smoke",
    "sweep",
}
# the keys of a grid's ``sweep`` (what ``--add-method`` gives a method on a validation-sweep grid)
SWEEP_KEYS = {"batch_size", "batch_fields", "lr_scale", "lr_fields"}


@dataclass(frozen=True)
class GridSpec:
    name: str
    base: Mapping[str, Any]
    axes: Mapping[str, Sequence[Any]]
    exclude: tuple[Mapping[str, Any], ...] = ()
    method_common: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    # stated budget (documentation, checked by tests)
    budget: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None
    # each cell takes its method's ``smoke_settings`` (backbone, public split, small heads), as
    # check-method does; the grid's explicit method params still win (a smoke grid runs small)
    smoke: bool = False
    # a validation sweep (quickstart_tune): what ``--add-method M`` gives a method the grid does not
    # run, the variants the built-ins were chosen from (:func:`sweep_variants`); {} elsewhere
    sweep: Mapping[str, Any] = field(default_factory=dict)


def with_seeds(grid: GridSpec, seeds: Sequence[int]) -> GridSpec:
    """The grid with its training seeds replaced (``run --seeds 0,1,2``): every other axis is kept,
    so seed 0's cells keep their ids and finished ones are skipped."""
    base = {k: v for k, v in grid.base.items() if k != "seed"}
    axes = {**{k: v for k, v in grid.axes.items() if k != "seed"}, "seed": [int(s) for s in seeds]}
    return dataclasses.replace(grid, base=base, axes=axes)


def parse_added_method(text: str) -> dict[str, Any]:
    """``--add-method``'s value: ``NAME`` or ``NAME:field=value,field=value`` (the settings the
    track's validation sweep chose, as ``python -m benchmark.commands.tuning`` prints them), as a
    grid's method entry; values read as YAML scalars."""
    name, _, rest = text.partition(":")
    entry: dict[str, Any] = {"name": name.strip()}
    for item in filter(None, (i.strip() for i in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--add-method {text!r}: expected NAME:field=value,field=value")
        entry[key.strip()] = yaml.safe_load(value)
    return entry


def _scaled(value: float, factor: float) -> float:
    return float(f"{value * factor:.12g}")  # 0.032 x 10 = 0.32, not 0.32000000000000006


def sweep_variants(
    sweep: Mapping[str, Any], name: str, rates: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """The method entries a validation sweep gives method ``name`` (its config's defaults): every
    batch size of ``batch_size`` in each of the ``batch_fields`` the config has, times every factor
    of ``lr_scale`` applied to all of the ``lr_fields`` it has together (FLESD's local and
    distillation rates move as one), as quickstart_tune swept the built-ins. ``rates``: the 1x
    learning rates where they are not the config's defaults (Orchestra's grid sweeps its paper's
    grid value 0.03). A config with none of the fields gets one entry, its defaults."""
    cfg = METHODS.get(name).Config()
    have = {f.name for f in dataclasses.fields(cfg)}
    batch_fields = [f for f in sweep.get("batch_fields", ["batch_size"]) if f in have]
    lr_fields = [f for f in sweep.get("lr_fields", ["lr"]) if f in have]
    batches = [{f: int(b) for f in batch_fields} for b in sweep.get("batch_size", [])] or [{}]
    if not batch_fields:
        batches = [{}]
    scales = [
        {f: _scaled((rates or {}).get(f, getattr(cfg, f)), float(s)) for f in lr_fields}
        for s in sweep.get("lr_scale", [])
    ] or [{}]
    if not lr_fields:
        scales = [{}]
    return [{"name": name, **b, **lr} for b in batches for lr in scales]


def with_methods(grid: GridSpec, names: Sequence[str]) -> GridSpec:
    """The grid with the methods ``names`` added to its method axis (``run --grid quickstart
    --add-method fedfoo``): every other setting is the grid's own, and each added method gets the
    grid's ``method_common`` and its own defaults, so its cells are the ones the grid's track ranks.
    On a grid with a ``sweep`` (``run --grid quickstart_tune --add-method fedfoo``) each added method
    gets the sweep's variants instead (:func:`sweep_variants`): the validation sweep the built-ins'
    settings were chosen by. ``NAME:field=value,...`` adds the method with those settings
    (:func:`parse_added_method`). A name the grid already runs is refused (its entry there may carry
    tuned parameters)."""
    if not names:
        return grid
    entries = [parse_added_method(n) for n in names]
    added = [e["name"] for e in entries]
    axes, base = dict(grid.axes), dict(grid.base)
    current = list(axes["method"]) if "method" in axes else [base.pop("method")]
    have = {m if isinstance(m, str) else dict(m).get("name") for m in current}
    twice = [n for n in added if n in have or added.count(n) > 1]
    if twice:
        raise ConfigError(f"--add-method {twice[0]!r}: grid {grid.name!r} already runs it")
    new: list[Any] = []
    for entry in entries:
        if grid.sweep and len(entry) == 1:
            load_builtins()
            new += sweep_variants(grid.sweep, entry["name"])
        else:
            new.append(entry)
    axes["method"] = [*current, *new]
    return dataclasses.replace(grid, base=base, axes=axes)


def with_tasks(grid: GridSpec, names: Sequence[str]) -> GridSpec:
    """The grid with the tasks ``names`` added to every task list of its cells (``run --grid
    quickstart --add-task ncm_probe``): its base's ``tasks``, or each entry of its ``tasks`` axis.
    Each added task takes its defaults; every other setting is the grid's own, so the cells
    pre-train exactly as the grid's do (cells that differ only in their tasks share one
    pre-training, and a finished one is reused). A task a list already holds is refused."""
    if not names:
        return grid
    twice = [n for n in names if list(names).count(n) > 1]
    if twice:
        raise ConfigError(f"--add-task {twice[0]!r} given twice")
    axes, base = dict(grid.axes), dict(grid.base)

    def added(tasks: Any) -> list[Any]:
        tasks = list(tasks or [])
        have = {t if isinstance(t, str) else dict(t).get("name") for t in tasks}
        already = [n for n in names if n in have]
        if already:
            raise ConfigError(f"--add-task {already[0]!r}: grid {grid.name!r} already runs it")
        return [*tasks, *names]

    if "tasks" in axes:
        axes["tasks"] = [added(t) for t in axes["tasks"]]
    else:
        base["tasks"] = added(base.get("tasks"))

    def entry(m: Any) -> Any:  # a method entry's own task list (``with: {tasks: [...]}``)
        if isinstance(m, Mapping) and isinstance(m.get("with"), Mapping) and "tasks" in m["with"]:
            return {**m, "with": {**m["with"], "tasks": added(m["with"]["tasks"])}}
        return m

    if "method" in axes:
        axes["method"] = [entry(m) for m in axes["method"]]
    elif "method" in base:
        base["method"] = entry(base["method"])
    return dataclasses.replace(grid, base=base, axes=axes)


def grid_names() -> list[str]:
    return sorted(p.stem for p in GRIDS_DIR.glob("*.yaml"))


def load_grid(name_or_path: str | Path) -> GridSpec:
    path = Path(name_or_path)
    if not path.suffix:
        path = GRIDS_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            import difflib

            names = grid_names()
            hint = difflib.get_close_matches(str(name_or_path), names, n=1)
            raise ConfigError(
                f"unknown grid {str(name_or_path)!r}."
                + (f" Did you mean {hint[0]!r}?" if hint else "")
                + f" Known: {', '.join(names)}"
            )
    if not path.exists():
        raise ConfigError(f"grid file {path} does not exist")
    text = read_grid_text(path)
    try:
        check_grid_depth(text, f"grid {path}")
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"grid {where}: not valid YAML: {problem}") from None
    check_expanded_size(raw, f"grid {path}")
    return parse_grid(raw, str(path))


# A grid's axes: the project's largest has under 1,000 combinations.
MAX_GRID_CELLS = 20_000


def check_cell_count(grid: GridSpec) -> int:
    """The number of axis combinations of ``grid`` (before ``exclude``); ConfigError above
    :data:`MAX_GRID_CELLS`, before the first one is built."""
    n = math.prod(len(v) for v in grid.axes.values())
    if n > MAX_GRID_CELLS:
        raise ConfigError(
            f"grid {grid.name!r}: its axes make {n:,} combinations, more than the "
            f"{MAX_GRID_CELLS:,} a grid may have: split it into several grids"
        )
    return n


def parse_grid(raw: Any, path: str | None = None) -> GridSpec:
    where = path or "grid"
    check_expanded_size(raw, where)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a grid must be a mapping")
    unknown = set(raw) - GRID_KEYS
    if unknown:
        import difflib

        key = min(unknown)
        hint = difflib.get_close_matches(key, sorted(GRID_KEYS), n=1)
        raise ConfigError(
            f"{where}: unknown grid key {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
        )
    base = raw.get("base") or {}
    axes = raw.get("axes") or {}
    if not isinstance(base, Mapping) or not isinstance(axes, Mapping):
        raise ConfigError(f"{where}: base and axes must be mappings")
    for key in (*base, *axes):
        if key not in CELL_FIELDS:
            import difflib

            hint = difflib.get_close_matches(key, CELL_FIELDS, n=1)
            raise ConfigError(
                f"{where}: unknown cell field {key!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
            )
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: axis {key!r} must be a non-empty list")
    exclude = raw.get("exclude") or []
    if not isinstance(exclude, list) or not all(isinstance(e, Mapping) for e in exclude):
        raise ConfigError(f"{where}: exclude must be a list of mappings")
    common = raw.get("method_common") or {}
    if not isinstance(common, Mapping):
        raise ConfigError(f"{where}: method_common must be a mapping")
    name = raw.get("name") or (Path(path).stem if path else "grid")
    sweep = raw.get("sweep") or {}
    if not isinstance(sweep, Mapping) or set(sweep) - SWEEP_KEYS:
        raise ConfigError(f"{where}: sweep must be a mapping of {sorted(SWEEP_KEYS)}")
    smoke = raw.get("smoke", False)
    if not isinstance(smoke, bool):
        raise ConfigError(f"{where}: smoke must be true or false")
    return GridSpec(
        str(name),
        dict(base),
        {k: list(v) for k, v in axes.items()},
        tuple(exclude),
        dict(common),
        str(raw.get("description", "")),
        dict(raw.get("budget") or {}),
        path,
        smoke=smoke,
        sweep=dict(sweep),
    )


def _as_component(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return dict(value)
    raise ConfigError(f"{where} must be a name or a mapping with 'name', got {value!r}")


def _resolve(
    registry: Any, raw: Any, where: str, extra: Mapping[str, Any] | None = None
) -> ComponentSpec:
    comp = _as_component(raw, where)
    name = registry.canonical(comp.pop("name"))
    cls = registry.get(name)
    params = dict(comp)
    if extra:
        fields = {f.name for f in dataclasses.fields(getattr(cls, "Config", cls))}
        common = {k: v for k, v in extra.items() if k in fields}
        # explicit params win, key by key inside nested configs too: an axis value's `augment:
        # {jitter: ...}` keeps method_common's `augment: {flip_p: 0}` (and both keep the method's
        # own defaults, benchmark.core.config)
        params = {
            **common,
            **{
                k: (
                    {**common[k], **v}
                    if isinstance(v, Mapping) and isinstance(common.get(k), Mapping)
                    else v
                )
                for k, v in params.items()
            },
        }
    try:
        cfg = from_mapping(getattr(cls, "Config", cls), params)
        if registry in (METHODS, TASKS):
            check_common_fields(cfg)
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"{where} {name!r}: {exc}") from None
    return ComponentSpec(name, _version(registry, cls), config_dict(cfg))


def check_common_fields(cfg: Any) -> None:
    """The harness's own check of the fields every method and task shares by name, so a plugin
    without its own validation cannot run a cell with them out of range: learning rates (``lr``,
    ``*_lr``, ``blr``) > 0, batch sizes (``*batch_size``) >= 1, epochs and rounds (``*epochs``,
    ``*rounds``; warm-ups may be 0) >= 1."""
    for f in dataclasses.fields(cfg):
        value, name = getattr(cfg, f.name), f.name
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if (name in ("lr", "blr") or name.endswith("_lr")) and not value > 0:
            raise ConfigError(f"{name} must be > 0, got {value}")
        if name.endswith("batch_size") and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
        if name.endswith(("epochs", "rounds")) and not name.startswith("warmup") and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")


def component_version(registry: Any, cls: Any) -> str:
    """The version the installed component ``cls`` of ``registry`` puts into a cell (public: accept
    refuses a record whose cell names another, issue 44)."""
    return _version(registry, cls)


def _version(registry: Any, cls: Any) -> str:
    """The version a component contributes to the cell identity; a method's includes the versions of
    the methods whose code it reuses (``benchmark.contracts.method.identity_version``)."""
    if registry is METHODS:
        return identity_version(cls, METHODS.get)
    return str(getattr(cls, "version", "1"))


def _loadable(registry: Any) -> list[str]:
    """The registry's names whose component imports: a broken installed plugin, or a name two
    distributions register, fails only the grids that use it (``resolve_cell`` of its cells raises
    PluginError or DuplicateName, exit 2 at the door), not the ones that never name it."""
    from benchmark.core.registry import DuplicateName, PluginError

    names = []
    for name in registry.names():
        try:
            registry.get(name)
        except (PluginError, DuplicateName):
            continue
        names.append(name)
    return names


def _fields_of(registry: Any, name: str) -> set[str]:
    cls = registry.get(name)
    return {f.name for f in dataclasses.fields(getattr(cls, "Config", cls))}


def resolve_cell(values: Mapping[str, Any], method_common: Mapping[str, Any] | None = None) -> Cell:
    """Validate and fill one raw cell mapping into a ``Cell``."""
    load_builtins()
    missing = [k for k in ("dataset", "backbone", "method", "partition") if k not in values]
    if missing:
        raise ConfigError(f"cell is missing {', '.join(missing)}")
    fl_raw = values.get("fl") or {}
    if not isinstance(fl_raw, Mapping):
        raise ConfigError(f"fl must be a mapping, got {fl_raw!r}")
    fl = from_mapping(FLConfig, fl_raw)
    for key in ("seed", "partition_seed"):
        v = values.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{key} must be a non-negative integer, got {v!r}")
    tasks_raw = values.get("tasks") or []
    if not isinstance(tasks_raw, list):
        raise ConfigError("tasks must be a list")
    method = _resolve(METHODS, values["method"], "method", method_common)
    cell = Cell(
        dataset=_resolve(DATASETS, values["dataset"], "dataset"),
        backbone=_resolve(BACKBONES, values["backbone"], "backbone"),
        method=method,
        partition=_resolve(PARTITIONERS, values["partition"], "partition"),
        partition_seed=int(values.get("partition_seed", 0)),
        public=None
        if values.get("public") is None
        else _resolve(PUBLIC_SPLITS, values["public"], "public"),
        fl=fl,
        seed=int(values.get("seed", 0)),
        tasks=tuple(_resolve(TASKS, t, "task") for t in tasks_raw),
        precision=_precision(values.get("precision", "fp32"), method.name),
        kernels=_kernels(values.get("kernels", "native")),
    )
    check_requirements(cell)
    return cell


def _kernels(value: Any) -> str:
    if value not in KERNELS:
        raise ConfigError(f"kernels must be one of {', '.join(KERNELS)}, got {value!r}")
    return str(value)


def _precision(value: Any, method: str) -> str:
    if value not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    supported = METHODS.get(method).precisions
    if not supports(tuple(supported), str(value)):
        raise ConfigError(
            f"method {method!r} trains in {', '.join(supported)} only (its `precisions`), but the cell "
            f"asks for {value}: set `precision: fp32` for it, or take its steps through ctx.precision "
            "and declare the precision"
        )
    return str(value)


def check_requirements(cell: Cell) -> None:
    from benchmark.contracts.types import Requirement

    requires = METHODS.get(cell.method.name).requires
    if Requirement.PUBLIC_DATA in requires and cell.public is None:
        raise ConfigError(
            f"method {cell.method.name!r} needs public data, but the cell has none: add "
            "`public: {name: holdout, fraction: 0.1}` (or `first_shard`) to the cell"
        )


def _matches(raw: Mapping[str, Any], pattern: Mapping[str, Any]) -> bool:
    for key, want in pattern.items():
        have = raw.get(key)
        if isinstance(want, (str, int, float)) and not isinstance(want, bool):
            name = have if not isinstance(have, Mapping) else have.get("name")
            if isinstance(want, str):
                if name != want:
                    return False
            elif have != want:
                return False
        elif isinstance(want, Mapping):
            if not isinstance(have, Mapping) and not (
                isinstance(have, str) and set(want) <= {"name"}
            ):
                return False
            have_map = _as_component(have, key) if isinstance(have, str) else have
            if any(have_map.get(k) != v for k, v in want.items()):
                return False
        elif have != want:
            return False
    return True


def _canonical_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Raw values with component names canonicalised, for matching excludes and --only filters."""
    load_builtins()
    out = dict(raw)
    for key, reg in (
        ("method", METHODS),
        ("dataset", DATASETS),
        ("partition", PARTITIONERS),
        ("backbone", BACKBONES),
        ("public", PUBLIC_SPLITS),
    ):
        v = out.get(key)
        if v is None:
            continue
        comp = _as_component(v, key)
        try:
            comp["name"] = reg.canonical(comp["name"])
        except KeyError:
            pass
        out[key] = comp
    return out


def parse_only(only: str | None) -> dict[str, str]:
    """``--only method=fedema,partition=iid`` → {"method": "fedema", "partition": "iid"}."""
    if not only:
        return {}
    out = {}
    for part in only.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--only takes key=value pairs, got {part!r}")
        out[key.strip()] = value.strip()
    return out


def with_smoke_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with its method's ``smoke_settings`` applied (as in ``conformance.smoke_cell``): cell
    fields are replaced, method params filled where the grid sets none."""
    out = dict(raw)
    method = _as_component(raw.get("method"), "method")
    for key, value in dict(METHODS.get(METHODS.canonical(method["name"])).smoke_settings).items():
        out[key] = {**value, **method} if key == "method" else copy.deepcopy(value)
    return out


def expand_grid(grid: GridSpec, *, only: Mapping[str, str] | None = None) -> list[Cell]:
    """Product of the axes, merged into ``base``, minus ``exclude``, validated; duplicates collapse
    by cell id."""
    load_builtins()
    common = dict(grid.method_common)
    if common:
        known = set().union(*(_fields_of(METHODS, n) for n in _loadable(METHODS)))
        for key in common:
            if key not in known:
                raise ConfigError(f"method_common key {key!r} is a field of no registered method")
    if only:
        check_only(grid, only)
    check_cell_count(grid)
    keys = list(grid.axes)
    cells: dict[str, Cell] = {}
    for combo in itertools.product(*(grid.axes[k] for k in keys)):
        raw: dict[str, Any] = copy.deepcopy(dict(grid.base))
        for key, value in zip(keys, combo):
            value = copy.deepcopy(value)
            if isinstance(value, Mapping) and "with" in value:
                with_ = value.pop("with")
                if not isinstance(with_, Mapping):
                    raise ConfigError(f"axis {key}: 'with' must be a mapping")
                for wk, wv in with_.items():
                    if wk not in CELL_FIELDS:
                        raise ConfigError(f"axis {key}: unknown cell field {wk!r} in 'with'")
                    raw[wk] = {**raw.get(wk, {}), **wv} if wk == "fl" else wv
            if key == "fl":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"axis fl values must be mappings, got {value!r}")
                raw["fl"] = {**(raw.get("fl") or {}), **value}
            else:
                raw[key] = value
        canon = _canonical_raw(raw)
        if any(_matches(canon, ex) for ex in grid.exclude):
            continue
        if only:
            filt = {
                k: v
                for k, v in _canonical_raw({k: v for k, v in only.items() if k != "cell"}).items()
            }
            filt = {
                k: (v["name"] if isinstance(v, Mapping) and set(v) == {"name"} else v)
                for k, v in filt.items()
            }
            if not _matches(
                canon,
                {k: (int(v) if k in ("seed", "partition_seed") else v) for k, v in filt.items()},
            ):
                continue
        if grid.smoke:
            raw = with_smoke_settings(raw)
        # method_common only fills fields the method's config has; explicit params win
        cell = resolve_cell(raw, common)
        if only and "cell" in only and not cell.cell_id.startswith(only["cell"]):
            continue
        cells.setdefault(cell.cell_id, cell)
    if only and not cells:
        raise ConfigError(
            f"--only {','.join(f'{k}={v}' for k, v in only.items())} matches no cell of grid "
            f"{grid.name!r}"
        )
    return list(cells.values())


ONLY_REGISTRIES = {
    "method": METHODS,
    "dataset": DATASETS,
    "partition": PARTITIONERS,
    "backbone": BACKBONES,
    "public": PUBLIC_SPLITS,
}


def _grid_names(grid: GridSpec, key: str) -> set[str]:
    """The component names ``key`` takes in ``grid`` (its base value and its axis values)."""
    values = [grid.base.get(key), *grid.axes.get(key, ())]
    names = set()
    for v in values:
        if isinstance(v, str):
            names.add(v)
        elif isinstance(v, Mapping) and isinstance(v.get("name"), str):
            names.add(v["name"])
    # `with:` may set this field too
    for v in grid.axes.get("method", ()) if key != "method" else ():
        w = v.get("with", {}) if isinstance(v, Mapping) else {}
        if isinstance(w, Mapping) and key in w:
            names |= _grid_names(dataclasses.replace(grid, base={key: w[key]}, axes={}), key)
    return names


def task_specs(tree: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every task spec (name, raw params) under any ``tasks`` list of a grid's base or axes, however
    deeply nested (an axis value's ``with`` included), without resolving anything."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            if key == "tasks" and isinstance(value, list):
                for item in value:
                    if isinstance(item, str):
                        yield item, {}
                    elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
                        yield item["name"], {k: v for k, v in item.items() if k != "name"}
            else:
                yield from task_specs(value)
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from task_specs(item)


def check_only(grid: GridSpec, only: Mapping[str, str]) -> None:
    """``--only`` keys are cell fields (or ``cell``); a component name must be registered: otherwise
    a ConfigError with a did-you-mean, instead of a silent run of 0 cells."""
    import difflib

    keys = (*CELL_FIELDS, "cell")
    for key, value in only.items():
        if key not in keys:
            hint = difflib.get_close_matches(key, keys, n=1)
            raise ConfigError(
                f"--only key {key!r} is not a cell field"
                + (f"; did you mean {hint[0]!r}?" if hint else f" (one of {', '.join(keys)})")
            )
        if key in ("seed", "partition_seed"):
            if not str(value).isdigit():
                raise ConfigError(f"--only {key}={value!r}: a non-negative integer")
            continue
        registry = ONLY_REGISTRIES.get(key)
        if registry is None:
            continue
        try:
            registry.canonical(value)
        except Exception:  # noqa: BLE001 - the registry's own error type; the message below says it all
            names = sorted(_grid_names(grid, key) or set(registry.names()))
            hint = difflib.get_close_matches(value, names, n=1)
            msg = f"; did you mean {hint[0]!r}?" if hint else f" (this grid has {', '.join(names)})"
            raise ConfigError(f"--only {key}={value!r}: no such {key}{msg}") from None
