"""``python -m leaderboard build [--results DIR ...] [--out DIR]``, ``python -m leaderboard serve``,
``python -m leaderboard margins [--results DIR ...] [--task knn] [--baseline no_pretrain]`` and
``python -m leaderboard list tracks [--tracks FILE]``."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _build(args: argparse.Namespace) -> int:
    from leaderboard.build import build_model
    from leaderboard.pages import render_site
    from leaderboard.site_config import load_site_config, load_tracks

    t0 = time.perf_counter()
    results = args.results or [Path("results")]
    missing = [str(r) for r in results if not Path(r).is_dir()]
    if missing:
        print(
            f"error: --results {', '.join(missing)}: no such folder (a results/ folder or a run root)",
            file=sys.stderr,
        )
        return 2
    from benchmark.records.tracks import TrackError

    try:  # a tracks file is bounded like a grid: one line, exit 2 (issue 52)
        tracks = load_tracks(args.tracks) if args.tracks else None
        config = load_site_config(args.tracks)
    except TrackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = build_model(
        results,
        tracks=tracks,
        references_dir=args.references,
        config=config,
        repo_url=args.repo_url,
    )
    index = render_site(model, args.out)
    for s in model.skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    for path, reason in model.reference_errors:
        print(f"invalid reference file {path}: {reason}", file=sys.stderr)
    n_rows = sum(len(t.table) for t in model.tracks)
    print(
        f"{len(model.records)} records, {len(model.skipped)} skipped, {len(model.tracks)} tracks "
        f"({n_rows} rows), {len(model.untracked)} records on no track; built in {time.perf_counter() - t0:.2f} s"
    )
    print(f"site: {index.resolve()}")
    return 0


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)


def make_server(directory: Path, port: int = 0, verbose: bool = False) -> ThreadingHTTPServer:
    """A static file server on 127.0.0.1 (port 0 = an ephemeral port; read it from
    ``server.server_address``)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.verbose = verbose  # type: ignore[attr-defined]
    return server


def _serve(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if not (directory / "index.html").exists():
        print(
            f"{directory}/index.html does not exist; run `python -m leaderboard build` first",
            file=sys.stderr,
        )
        return 2
    server = make_server(directory, args.port, verbose=True)
    host, port = server.server_address[:2]
    print(f"serving {directory.resolve()} at http://{host}:{port}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m leaderboard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the static site from result records")
    b.add_argument(
        "--results",
        action="append",
        type=Path,
        help="a results/ folder or a run root; records are found recursively (repeatable; default results)",
    )
    b.add_argument(
        "--out", type=Path, default=Path("build/site"), help="output folder (default build/site)"
    )
    b.add_argument(
        "--tracks",
        type=Path,
        default=None,
        help="tracks YAML (default leaderboard/site_config.yaml)",
    )
    b.add_argument(
        "--references",
        type=Path,
        default=None,
        help="paper-reported numbers (default results/reference)",
    )
    b.add_argument(
        "--repo-url",
        default=None,
        help="the repository's web address, e.g. https://github.com/OWNER/REPO: commits and sources become "
        "links (default: site.repo_url in the tracks YAML; none when empty)",
    )
    s = sub.add_parser("serve", help="serve a built site on 127.0.0.1")
    s.add_argument(
        "--dir", type=Path, default=Path("build/site"), help="the built site (default build/site)"
    )
    s.add_argument(
        "--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0 = any free port)"
    )
    m = sub.add_parser(
        "margins",
        help="per-seed paired margins of every method over a baseline (default random init)",
    )
    m.add_argument(
        "--results",
        action="append",
        type=Path,
        help="a results/ folder or a run root (repeatable; default results)",
    )
    m.add_argument("--task", default="knn", help="task registry name (default knn)")
    m.add_argument(
        "--baseline", default="no_pretrain", help="baseline method (default no_pretrain)"
    )
    m.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    m.add_argument(
        "--select",
        action="store_true",
        help="per method, the configuration with the highest margin averaged over partitions (validation "
        "runs only: refuses test-split records)",
    )
    lst = sub.add_parser(
        "list", help="list the leaderboard's tracks (id, title, dataset, task, card)"
    )
    lst.add_argument("what", choices=["tracks"], help="what to list")
    lst.add_argument(
        "--tracks",
        type=Path,
        default=None,
        help="tracks YAML (default leaderboard/site_config.yaml)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return {"build": _build, "serve": _serve, "margins": _margins, "list": _list}[args.command](
        args
    )


def _list(args: argparse.Namespace) -> int:
    from benchmark.records.tracks import TrackError, track_lines
    from leaderboard.site_config import load_tracks

    try:
        tracks = load_tracks(args.tracks)
    except (OSError, TrackError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(track_lines(tracks)))
    return 0


def _margins(args: argparse.Namespace) -> int:
    from leaderboard.build import margins_from_dirs
    from leaderboard.margins import markdown, select_best, selection_markdown, to_json

    missing = [str(r) for r in (args.results or [Path("results")]) if not Path(r).is_dir()]
    if missing:
        print(f"error: --results {', '.join(missing)}: no such folder", file=sys.stderr)
        return 2
    table = margins_from_dirs(
        args.results or [Path("results")], task=args.task, baseline=args.baseline
    )
    if table.empty:
        print(
            f"no {args.task} scores with a {args.baseline} partner of the same seed and setting",
            file=sys.stderr,
        )
        return 1
    if args.select:
        try:
            selection = select_best(table)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(
            to_json(selection)
            if args.json
            else selection_markdown(selection, task=args.task, baseline=args.baseline)
        )
        return 0
    print(to_json(table) if args.json else markdown(table, task=args.task, baseline=args.baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
