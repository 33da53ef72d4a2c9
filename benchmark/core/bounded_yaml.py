"""Bounded reading of a YAML file from outside (a grid, a tracks file): its size, its nesting and
its expanded size are checked before it is composed (issues 44 and 52). Used by
:mod:`benchmark.grids.expand` and :mod:`benchmark.records.tracks`; kept here so that neither imports
the other's layer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from benchmark.core.config import ConfigError

# What a grid file may be before it is parsed (issue 44): the project's largest grid is under 9 kB
# and 5 levels deep; a file of 100 kB nested 50,000 deep crashed the parser with RecursionError, a
# link to /dev/zero ran out of memory, a 60 MB description loaded.
MAX_GRID_BYTES = 1 << 20
MAX_GRID_DEPTH = 64


def read_grid_text(path: Path, what: str = "grid") -> str:
    """The grid file's text, refused (ConfigError: one line, exit 2) unless it is a regular file (a
    link to one is followed; a device, a FIFO or a folder is not read) of at most
    :data:`MAX_GRID_BYTES`, in UTF-8; read with that cap whatever its size said. ``what`` names the
    file in a refusal (a tracks file is read the same way)."""
    import stat

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} file {path} is not a regular file (refused, not read)")
        if info.st_size > MAX_GRID_BYTES:
            raise ConfigError(
                f"{what} file {path} holds {info.st_size:,} bytes, more than the "
                f"{MAX_GRID_BYTES:,} a {what} file may hold"
            )
        with path.open("rb") as f:
            data = f.read(MAX_GRID_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} file {path} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_GRID_BYTES:
        raise ConfigError(f"{what} file {path} is more than {MAX_GRID_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} file {path} is not UTF-8 text: {exc.reason}") from None


def check_grid_depth(text: str, where: str) -> None:
    """ConfigError when the YAML ``text`` nests more than :data:`MAX_GRID_DEPTH` mappings and lists,
    found from its events (PyYAML's parser keeps a stack, it does not recurse) before it is composed
    (the composer recurses once per level)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_GRID_DEPTH:
                raise ConfigError(
                    f"{where}: nested more than {MAX_GRID_DEPTH} levels deep (a grid is under 10)"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


# What a grid file may expand to. YAML aliases (``*name``) share one object where they are read, and
# the grid's cells copy and hash it once per use: 697 bytes of nested aliases ask for gigabytes. The
# project's largest grid has under 1,000 values.
MAX_GRID_NODES = 100_000


def check_expanded_size(raw: Any, where: str) -> None:
    """ConfigError when ``raw`` holds more than :data:`MAX_GRID_NODES` values with every alias
    expanded; counted without expanding anything, and without recursion."""
    count, stack = 0, [raw]
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_GRID_NODES:
            raise ConfigError(
                f"{where}: more than {MAX_GRID_NODES:,} values once its YAML aliases are expanded "
                "(an alias bomb, or a grid to split)"
            )
        if isinstance(value, Mapping):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
