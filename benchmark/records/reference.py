"""Paper-reported numbers (``results/reference/*.yaml``): the schema and its validator. Torch-free.

One YAML file holds one table of one paper, transcribed exactly as the spec reports it::

    source: "Orchestra (Lubana et al., ICML 2022)"      # the paper
    table: "Table 1"                                     # where in the paper
    spec: "docs/methods/orchestra.md §5"                              # the spec section the numbers were copied from
    metric: top1                                         # what the numbers are
    unit: percent                                        # percent | fraction | AP | points
    selection: final                                     # docs/protocols/evaluation.md §1/§6: final | best_epoch_test | ... | unknown
    notes: "..."                                         # optional free text (caveats, "?" readings)
    ablation: false                                      # true: a sensitivity/ablation study, kept off track pages
    settings: {dataset: cifar10, partition: dirichlet, alpha: 0.1, rounds: 100}   # shared by every number
    columns:                                             # one entry per printed column
      - {key: cd_linear, label: "CD Linear", card: linear/orchestra, settings: {num_clients: 100}}
    rows:                                                # one entry per printed row
      - {label: f-SimCLR, method: fedavg_simclr, settings: {...}, values: ["58.36±0.19", ...]}

``card`` names a protocol card of docs/protocols/evaluation.md; ``card_id`` (optional, on a column
or the file) is set only when the paper's protocol is exactly one of our cards, and only then may
the leaderboard rank the number with ours. A value is a number, ``"mean±std"``, a number with a
trailing ``?`` (uncertain reading in the spec), or ``null`` / ``"-"`` (not reported). Settings merge
file < column < row.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmark.records.schema import SELECTION_RULES

SELECTIONS = (*SELECTION_RULES, "unknown")  # a reference may not say how its number was chosen
UNITS = ("percent", "fraction", "AP", "points")
_FILE_KEYS = {
    "source",
    "table",
    "spec",
    "url",
    "metric",
    "unit",
    "selection",
    "notes",
    "settings",
    "columns",
    "rows",
    "card",
    "card_id",
    "ablation",
}
_COLUMN_KEYS = {"key", "label", "card", "card_id", "settings", "metric", "unit", "selection"}
_ROW_KEYS = {"label", "method", "settings", "values", "notes"}
_VALUE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:(?:±|\+-|\+/-)\s*(\d+(?:\.\d+)?))?\s*(\?)?\s*$")


class ReferenceError(ValueError):
    """A reference file does not follow the schema."""


@dataclass(frozen=True, kw_only=True)
class ReferenceValue:
    """One number printed in a paper, with everything needed to decide whether it is comparable with
    ours."""

    source: str
    table: str
    file: str
    row: str
    column: str
    method: str | None  # our registry name, when the row is a method we implement
    card: str  # protocol card name (docs/protocols/evaluation.md)
    card_id: str | None  # set only when the protocol is exactly one of our cards
    selection: str
    metric: str
    unit: str
    mean: float
    std: float | None
    uncertain: bool
    settings: Mapping[str, Any] = field(default_factory=dict)
    ablation: bool = False
    # the value exactly as written in the file (keeps trailing zeros: "0.70", "78.0")
    text: str = ""

    @property
    def selects_on_test(self) -> bool:
        return self.selection != "final"

    @property
    def task(self) -> str:
        """The task family of the card: ``linear/orchestra`` → ``linear``; ``knn@v1`` → ``knn``."""
        return re.split(r"[/@]", self.card, maxsplit=1)[0]

    @property
    def percent(self) -> float:
        """The value on a 0-100 scale (fractions are multiplied by 100; other units are returned
        unchanged)."""
        return self.mean * 100 if self.unit == "fraction" else self.mean

    @property
    def display(self) -> str:
        if self.text:
            return self.text
        text = f"{self.mean:g}" if self.std is None else f"{self.mean:g}±{self.std:g}"
        return text + ("?" if self.uncertain else "")


@dataclass(frozen=True)
class ReferenceTable:
    path: Path
    source: str
    table: str
    spec: str
    notes: str
    values: tuple[ReferenceValue, ...]


class _Number(float):
    """A float that remembers how it was written (``0.70`` stays ``0.70`` on the page)."""

    text: str

    def __new__(cls, value: float, text: str) -> _Number:
        obj = super().__new__(cls, value)
        obj.text = text
        return obj


class _Loader(yaml.SafeLoader):
    pass


def _construct_number(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    tag = node.tag.rsplit(":", 1)[-1]
    value = (
        yaml.SafeLoader.construct_yaml_float
        if tag == "float"
        else yaml.SafeLoader.construct_yaml_int
    )(loader, node)
    return (
        _Number(float(value), str(node.value))
        if isinstance(value, (int, float)) and math.isfinite(value)
        else value
    )


_Loader.add_constructor("tag:yaml.org,2002:float", _construct_number)


def _text_of(raw: Any) -> str:
    return getattr(raw, "text", None) or (str(raw).strip() if isinstance(raw, str) else repr(raw))


def parse_value(raw: Any, where: str) -> tuple[float, float | None, bool] | None:
    """``58.36±0.19`` → (58.36, 0.19, False); ``34.9?`` → (34.9, None, True); null or ``-`` →
    None."""
    if raw is None or (isinstance(raw, str) and raw.strip() in ("-", "", "?")):
        return None
    if isinstance(raw, bool):
        raise ReferenceError(f"{where}: a value must be a number, got {raw!r}")
    if isinstance(raw, (int, float)):
        return float(raw), None, False
    match = _VALUE.match(str(raw))
    if not match:
        raise ReferenceError(
            f"{where}: cannot read {raw!r} (expected 12.3, '12.3±0.4', '12.3?' or null)"
        )
    mean, std, unsure = match.groups()
    return float(mean), (float(std) if std is not None else None), unsure is not None


def _check_keys(raw: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ReferenceError(f"{where} must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - allowed
    if unknown:
        raise ReferenceError(
            f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}"
        )
    return raw


def _settings(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ReferenceError(f"{where}.settings must be a mapping")
    return dict(raw)


def _check_columns(columns: list[Any], where: str) -> None:
    """Each column has known keys, a label, and a key no other column has."""
    keys = set()
    for i, col in enumerate(columns):
        _check_keys(col, _COLUMN_KEYS, f"{where}: columns[{i}]")
        if "label" not in col:
            raise ReferenceError(f"{where}: columns[{i}] needs a label")
        key = col.get("key", col["label"])
        if key in keys:
            raise ReferenceError(f"{where}: duplicate column key {key!r}")
        keys.add(key)


def _row_method(row: Mapping[str, Any], rwhere: str) -> str | None:
    """A row's method: a registry name (snake case) or None."""
    method = row.get("method")
    if method is not None and not (isinstance(method, str) and re.fullmatch(r"[a-z0-9_]+", method)):
        raise ReferenceError(
            f"{rwhere}: method must be a registry name (snake case) or null, got {method!r}"
        )
    return method


def parse_reference(raw: Any, path: Path | str = "<memory>") -> ReferenceTable:
    where = str(path)
    doc = _check_keys(raw, _FILE_KEYS, where)
    for key in ("source", "table", "metric", "unit", "selection", "columns", "rows"):
        if key not in doc:
            raise ReferenceError(f"{where}: missing required key {key!r}")
    columns = doc["columns"]
    rows = doc["rows"]
    if not isinstance(columns, list) or not columns:
        raise ReferenceError(f"{where}: columns must be a non-empty list")
    if not isinstance(rows, list) or not rows:
        raise ReferenceError(f"{where}: rows must be a non-empty list")
    base = _settings(doc.get("settings"), where)
    out: list[ReferenceValue] = []
    _check_columns(columns, where)
    for j, row in enumerate(rows):
        rwhere = f"{where}: rows[{j}]"
        _check_keys(row, _ROW_KEYS, rwhere)
        if "label" not in row or "values" not in row:
            raise ReferenceError(f"{rwhere} needs a label and values")
        values = row["values"]
        if not isinstance(values, list) or len(values) != len(columns):
            raise ReferenceError(
                f"{rwhere} ({row['label']}) has {len(values) if isinstance(values, list) else '?'} "
                f"values for {len(columns)} columns"
            )
        method = _row_method(row, rwhere)
        for col, raw_value in zip(columns, values):
            parsed = parse_value(raw_value, f"{rwhere} / {col['label']}")
            if parsed is None:
                continue
            selection = col.get("selection", doc["selection"])
            unit = col.get("unit", doc["unit"])
            card = col.get("card", doc.get("card"))
            if selection not in SELECTIONS:
                raise ReferenceError(f"{where}: selection {selection!r} not in {SELECTIONS}")
            if unit not in UNITS:
                raise ReferenceError(f"{where}: unit {unit!r} not in {UNITS}")
            if not isinstance(card, str) or not card:
                raise ReferenceError(
                    f"{where}: column {col['label']!r} has no protocol card (card: ...)"
                )
            mean, std, unsure = parsed
            out.append(
                ReferenceValue(
                    source=str(doc["source"]),
                    table=str(doc["table"]),
                    file=Path(path).name,
                    row=str(row["label"]),
                    column=str(col["label"]),
                    method=method,
                    card=card,
                    card_id=col.get("card_id", doc.get("card_id")),
                    selection=selection,
                    metric=str(col.get("metric", doc["metric"])),
                    unit=unit,
                    mean=mean,
                    std=std,
                    uncertain=unsure,
                    ablation=bool(doc.get("ablation", False)),
                    text=_text_of(raw_value),
                    settings={
                        **base,
                        **_settings(col.get("settings"), f"{where}: {col['label']}"),
                        **_settings(row.get("settings"), rwhere),
                    },
                )
            )
    return ReferenceTable(
        Path(path),
        str(doc["source"]),
        str(doc["table"]),
        str(doc.get("spec", "")),
        str(doc.get("notes", "")),
        tuple(out),
    )


def load_reference(path: Path) -> ReferenceTable:
    try:
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_Loader)
    except (OSError, yaml.YAMLError) as exc:
        raise ReferenceError(f"{path}: {exc}") from None
    return parse_reference(raw, path)


def iter_reference_files(root: Path) -> Iterator[Path]:
    """Every reference table of a folder: its ``*.yaml`` files but :data:`PLUGIN_PAPERS`."""
    root = Path(root)
    if root.is_dir():
        yield from sorted(p for p in root.glob("*.yaml") if p.is_file() and p.name != PLUGIN_PAPERS)


# A plugin ships its paper's tables as YAML files in one of its packages and names that package in
# this entry-point group:
#   [project.entry-points."fssl_bench.references"]
#   fedfoo = "fssl_fedfoo.references"
REFERENCE_GROUP = "fssl_bench.references"
# beside its tables, a plugin may name its method's paper in a file of this name (the schema of
# leaderboard/papers.yaml: ``papers:`` and ``methods:``); it is not a reference table
PLUGIN_PAPERS = "papers.yaml"


def plugin_reference_dirs() -> tuple[list[Path], list[tuple[Path, str]]]:
    """The folders of the packages installed plugins name in :data:`REFERENCE_GROUP` (found without
    importing them), and (entry point, reason) for those that name no package."""
    from importlib import metadata

    dirs, bad = [], []
    for ep in metadata.entry_points(group=REFERENCE_GROUP):
        try:
            spec = importlib.util.find_spec(ep.value)
        except (ImportError, ValueError) as exc:
            spec, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "it names no package"
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:
            dirs += [Path(p) for p in locations]
        else:
            bad.append((Path(f"{REFERENCE_GROUP}:{ep.name}"), f"{ep.value!r}: {why}"))
    return dirs, bad


def load_references(
    root: Path, *, plugins: bool = False
) -> tuple[list[ReferenceTable], list[tuple[Path, str]]]:
    """Every valid table under ``root`` (and, with ``plugins``, in the folders plugins name in
    :data:`REFERENCE_GROUP`); invalid files come back as (path, reason), never raised."""
    good, bad = [], []
    roots = [Path(root)]
    if plugins:
        extra, bad = plugin_reference_dirs()
        roots += extra
    for path in (p for r in roots for p in iter_reference_files(r)):
        try:
            good.append(load_reference(path))
        except ReferenceError as exc:
            bad.append((path, str(exc)))
    return good, bad
