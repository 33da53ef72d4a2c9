"""docs/adding-a-method.md documents the whole plugin surface, read from the code: every name
``benchmark.api`` exports, every field of the types a hook receives or returns, every public method
of ``UnlabeledView`` and every capability ``MethodBase`` declares. A name added to the code without
a line in the guide fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from benchmark import api

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-method.md"


def documented() -> set[str]:
    """Every identifier the guide writes as code: in code spans (`name`, `name(args)`, `a.b`,
    `name=default`, ...) and in fenced code blocks. Prose mentions do not count."""
    parts = DOC.read_text(encoding="utf-8").split("```")
    code = parts[1::2] + [span for prose in parts[0::2] for span in re.findall(r"`([^`]+)`", prose)]
    return {name for text in code for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}


def _missing(names: list[str]) -> list[str]:
    doc = documented()
    return sorted(n for n in names if n not in doc)


def test_every_name_benchmark_api_exports_is_documented() -> None:
    assert _missing(list(api.__all__)) == []


@pytest.mark.parametrize(
    "cls",
    [
        api.RoundContext,
        api.ClientData,
        api.Encoder,
        api.Payload,
        api.ServerState,
        api.ClientState,
        api.InputSpec,
        api.AugmentConfig,
        api.LocalStats,
        api.FLConfig,
        api.Cell,
        api.ComponentSpec,
    ],
    ids=lambda c: c.__name__,
)
def test_every_field_of_the_types_a_method_touches_is_documented(cls: type) -> None:
    assert _missing([f.name for f in dataclasses.fields(cls)]) == []


def table_rows(anchor: str) -> set[str]:
    """The names in the first column of the table that follows ``anchor`` in the guide (`a`, `b`
    both count)."""
    lines = DOC.read_text(encoding="utf-8")
    lines = lines[lines.index(anchor) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:  # past the header and its rule
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    return {name for cell in rows for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell)}


@pytest.mark.parametrize(
    "cls,anchor",
    [
        (api.RoundContext, "**`RoundContext`**"),
        (api.ClientData, "**`ClientData`**"),
        (api.Encoder, "**`Encoder`**"),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_each_field_has_its_row_in_the_types_table(cls: type, anchor: str) -> None:
    assert table_rows(anchor) == {f.name for f in dataclasses.fields(cls)}


def test_each_declared_capability_has_its_row_in_the_method_base_table() -> None:
    declared = {n for n in vars(api.MethodBase).get("__annotations__", {}) if not n.startswith("_")}
    assert table_rows("**`MethodBase`**") == declared


def test_every_method_of_unlabeled_view_and_every_declared_capability_is_documented() -> None:
    view = [n for n, _ in inspect.getmembers(api.UnlabeledView) if not n.startswith("_")]
    assert {"to", "batch_indices", "batches", "normalize", "image_size"} <= set(view)
    capabilities = [
        n for n in vars(api.MethodBase).get("__annotations__", {}) if not n.startswith("_")
    ]
    assert {"requires", "payload_up", "precisions", "pretrains", "reuses"} <= set(capabilities)
    hooks = [
        n for n in vars(api.Method) if not n.startswith("_") and callable(getattr(api.Method, n))
    ]
    assert {"init_server", "client_update", "encoder"} <= set(hooks)
    assert _missing(view + capabilities + hooks + ["check_data", "export"]) == []


def test_the_track_section_names_every_track_and_the_command() -> None:
    from benchmark.records.tracks import load_tracks
    from benchmark.submission.submit_records import DEFAULT_TRACKS

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## 9. Which track fits which dataset") :]
    assert (
        "python -m benchmark list tracks" in section
        and "python -m leaderboard list tracks" in section
    )
    for track in load_tracks(DEFAULT_TRACKS):  # each track in a row that names its dataset
        row = next((line for line in section.splitlines() if f"`{track.id}`" in line), None)
        assert row is not None, f"track {track.id} is not in the table"
        assert f"`{track.dataset}`" in row.split("|")[1], (track.id, row)
