"""``list``: the registered components, grids and tracks."""

from __future__ import annotations

import argparse
import sys


def cmd_list(args: argparse.Namespace) -> int:
    from benchmark.contracts.registries import (
        BACKBONES,
        DATASETS,
        METHODS,
        PARTITIONERS,
        TASKS,
        load_builtins,
    )
    from benchmark.grids.expand import grid_names, load_grid

    load_builtins()
    if args.what == "tracks":
        from benchmark.records.tracks import load_tracks, track_lines
        from benchmark.submission.submit_records import DEFAULT_TRACKS

        print("\n".join(track_lines(load_tracks(DEFAULT_TRACKS))))
        return 0
    if args.what == "grids":
        for name in grid_names():
            g = load_grid(name)
            print(f"{name:24s} {g.description.splitlines()[0] if g.description else ''}")
        return 0
    reg = {
        "methods": METHODS,
        "datasets": DATASETS,
        "partitioners": PARTITIONERS,
        "tasks": TASKS,
        "backbones": BACKBONES,
    }[args.what]
    aliases: dict[str, list[str]] = {}
    for alias, target in reg.aliases().items():
        aliases.setdefault(target, []).append(alias)
    from benchmark.core.docstrings import summary
    from benchmark.core.registry import DuplicateName, PluginError
    from benchmark.core.terminal import printable

    for name in reg.names():
        try:
            obj = reg.get(name)
        # a broken plugin, or a name two distributions register: one warning, the listing goes on
        except (PluginError, DuplicateName) as exc:
            print(f"warning: {printable(exc)}", file=sys.stderr)
            continue
        doc = summary(obj.__doc__)
        extra = f" (aliases: {', '.join(sorted(aliases[name]))})" if name in aliases else ""
        print(f"{name:24s} {doc}{extra}")
    return 0
