"""Show that a refactor moved no number: the site's tables and CSVs, and the records a grid writes,
are the same with this tree's code as with the code of a base git ref.

    python scripts/layout_identity.py --base bef0477                      # site + smoke grid
    python scripts/layout_identity.py --base main --cells 9966fb 1c2d3e   # + chosen quickstart cells
    python scripts/layout_identity.py --base main --no-grid --keep /tmp/x  # site only, keep the outputs

For both trees (the base is checked out with ``git worktree add`` into a temporary folder and
removed afterwards; each tree runs with ``PYTHONPATH`` set to itself):

(a) ``python -m leaderboard build`` from the same records (``--results``, default this tree's
    ``results/``) and the same paper-reported numbers (``<results>/reference``); every ``<table>``
    element of every page and every CSV is compared byte for byte. A page whose tables differ only
    by a change listed in ``EXPECTED`` (a site-defect fix, with its reason) is reported as expected;
    any other difference is a failure.
(b) ``python -m benchmark run --grid smoke`` and, for each ``--cells`` prefix, the quickstart cells
    it selects, into temporary run roots; the records are compared after the fields that depend on
    the machine and the moment are dropped (``env``, ``created_at``, ``digest``, ``tracking``, and
    every timing and memory figure).

Exit 0 when everything is identical (or differs only as expected), 1 otherwise; 2 on a usage error.
Self-contained: the standard library only, and git.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL)
# record fields that depend on the machine or the moment, never on the code's numbers
# (concurrency: how the launcher placed a GPU cell; 0 and left out of the digest on the CPU)
VOLATILE = {
    "env",
    "created_at",
    "digest",
    "tracking",
    "peak_mem_bytes",
    "peak_gpu_mem_bytes",
    "gpu_hours",
    "concurrency",
}


# the "code that ran" row of a method page: whether the method's file changed since the records'
# commit, and by how many lines (the part a change of the file moves; the commit and records stay)
CODE_THAT_RAN = (
    r"(?s)(made at this commit\)</span>:)\s*"
    r"(?:<strong class=\"changed-since\">.*?|<span class=\"unchanged\">.*?</span>)(?=</td></tr>)"
)


@dataclass(frozen=True)
class Expected:
    """A table difference a site-defect fix intends, on pages whose path in the site matches
    ``pages``: ``undo`` (regex → replacement), applied to this tree's tables that match ``tables``,
    and ``gone``, the base's tables (matching it) that this tree no longer has, give back the base's
    tables exactly. Anything else that differs is still a failure."""

    pages: str
    reason: str
    tables: str = ""
    undo: tuple[tuple[str, str], ...] = ()
    gone: str = ""
    # tables of documentation text rendered from a file the change edited (no number): left out on both
    drop: str = ""
    # (regex → replacement) applied to both trees' tables that match ``tables``: a cell whose value
    # the change recomputes on purpose (issue 48: noise groups under the paired test)
    mask: tuple[tuple[str, str], ...] = ()
    # pages that only this tree has (a new page), matched against the page's path
    new: str = ""
    # CSVs whose path matches ``pages``: these columns may differ, every other column may not
    columns: tuple[str, ...] = ()


# issue 54: a partition label's tooltip says it in words, the label itself in parentheses at its end
WORDS_UNDO: tuple[tuple[str, str], ...] = (
    (r'<abbr title="(?:IID|Dirichlet label skew)[^"]*? \(([^"]*)\)">', r'<abbr title="\1">'),
)


# Issue 40's site fixes, then issue 48's (the intended table changes); each is undone on its own
# pages only.
EXPECTED: tuple[Expected, ...] = (
    Expected(
        pages=r"^tracks/",
        reason="the leader of each pool is bold on the track page (td.best)",
        tables=r'^<table class="sortable sticky" id="track-table">',
        undo=((r'<td class="num best" data-sort=', r'<td class="num" data-sort='),),
    ),
    Expected(
        pages=r"^methods/",
        reason=(
            "methods/README.md's <br> line breaks render as line breaks, and a method page lists "
            "only its own paper's numbers (other papers' runs of it, e.g. FedMAE's Table 1 rows of "
            "FedU and FedEMA, are left to references.html)"
        ),
        tables=r'^<table class="kv readme">',
        undo=((r"<br>", "&lt;br&gt;"),),
        gone=r'<tr class="reported">',
    ),
    Expected(
        pages=r"^methods/(fedmae|flesd|orchestra)\.html$",
        reason=(
            "the method's file-and-line links to its DEVIATION comments moved when its single-user "
            "methods/_shared module was folded into its file (FLESD's page now also lists the three "
            "that sat in the shared module), and the page lists only its own paper's numbers"
        ),
        drop=r'^<table class="kv readme">',
        gone=r'<tr class="reported">',
    ),
    Expected(
        pages=r"^methods/(featarc|fedema|fedmae|flesd|orchestra)\.html$",
        reason=(
            "issue 46: FeatARC's aggregation order and Orchestra's small clients are marked "
            "DEVIATION (a new line on each page), and the declarations of inert settings moved the "
            "file-and-line links of the other DEVIATION comments of these methods"
        ),
        drop=r'^<table class="kv readme">',
        gone=r'<tr class="reported">',
    ),
    Expected(
        pages=r"^submit\.html$",
        reason="submit.html renders docs/adding-a-method.md, whose prose issues 40 and 47 edited",
        drop=r"^<table",
    ),
) + (
    # Issue 48's site changes, against main at 7f7fb9d (records unchanged: the same 78)
    Expected(
        pages=r"^tracks/",
        reason=(
            "noise groups use the paired test where two cells share their seeds (the index's "
            "test), Welch's only where they do not, and the track table names the test under "
            "each group (FedAvg-SimCLR/FeatARC kNN IID and FLESD/FedAvg-SimCLR kNN Dir(0.1) no "
            "longer share a group)"
        ),
        tables=r'^<table class="sortable sticky" id="track-table">',
        undo=((r" \(paired over shared seeds, else Welch\)\">group</th>", '">group</th>'),),
        mask=(
            (
                r'(title="seed \d+">s\d+</a></td>\n<td class="num" data-sort="[^"]*">[^\n]*</td>\n)'
                r'<td class="num" data-sort="[^"]*">[^\n]*</td>',
                r"\1<td>GROUP</td>",
            ),
        ),
    ),
    Expected(
        pages=r"^entries/",
        reason=(
            "an entry's group is the paired test's, named with its test, and its rank carries the "
            "'not like for like' flag"
        ),
        tables=r'^<table class="kv">',
        undo=(
            (r" \((paired|Welch) test against the group's leader\)", ""),
            (r' <span class="badge warn" title="[^"]*">not like for like</span>', ""),
        ),
        mask=((r"(rank, group</th><td class=\"num\">[^,<]*, )[^ <]+", r"\1G"),),
    ),
    Expected(
        pages=r"^datasets/",
        reason="'within noise of the best' (noise group 1) under the paired test",
        tables=r'^<table class="sortable summary',
        mask=((r" near\b", ""), (r" · within noise of the best", "")),
    ),
    Expected(
        pages=r"^index\.html$",
        reason=(
            "the Tracks table's 'best (per partition)' carries the 'not like for like' flag and "
            "names the best like-for-like method beside a flagged best"
        ),
        tables=r'^<table class="sortable" id="tracks-table">',
        undo=(
            (
                r' <span class="badge warn" title="[^"]*">not like for like</span>'
                r'( \(best like for like: <a href="[^"]*">[^<]*</a>\))?',
                "",
            ),
        ),
    ),
    Expected(
        pages=r"^methods/|^references\.html$",
        reason=(
            "a rank in a method's Results table carries the 'not like for like' flag; a paper's "
            "number names the dataset it is evaluated on (eval_dataset, the pre-training dataset "
            "beside it) where it showed '—'"
        ),
        undo=(
            (r' <span class="badge warn" title="[^"]*">not like for like</span>', ""),
            (
                r'<tr class="reported"><td>([a-z0-9_]+)(?: \(pre-trained on [a-z0-9_]+\))?</td>'
                r"((?:(?!</tr>).)*?eval_dataset=\1\b)",
                r'<tr class="reported"><td>—</td>\2',
            ),
        ),
    ),
    Expected(pages=r"^compare\.html$", reason="the new compare page", new=r"^compare\.html$"),
    Expected(
        pages=r"^csv/(tracks|summaries|digits-[a-z0-9-]+)\.csv$",
        reason="noise groups under the paired test (the same change as the track pages)",
        columns=("noise_group",),
    ),
    # Issue 54's site changes, against main at c2ccfe5 (records unchanged: the same 84; no mean,
    # interval or rank moves)
    Expected(
        pages=r"^tracks/",
        reason=(
            "issue 54: group 1 is every cell the test cannot tell from the best, wherever it ranks, "
            "and a flagged ranked row shows its flag in the sticky method cell at 400 px"
        ),
        undo=(
            *WORDS_UNDO,
            (
                r'<span class="narrow-only"> <span class="badge warn narrow-flag"[^>]*>[^<]*</span></span>',
                "",
            ),
            (
                r'<span class="badge warn">not like for like</span> '
                r'<span class="std flag">other backbone: [^<]*</span> ',
                "",
            ),
        ),
        mask=(
            (
                r'(title="seed \d+">s\d+</a></td>\n<td class="num" data-sort="[^"]*">[^\n]*</td>\n)'
                r'<td class="num" data-sort="[^"]*">[^\n]*</td>',
                r"\1<td>GROUP</td>",
            ),
        ),
    ),
    Expected(
        pages=r"^entries/",
        reason=(
            "issue 54: an entry's group follows the one rule (tested against the group's best cell), "
            "and a row on another backbone than its pool is flagged"
        ),
        undo=(
            *WORDS_UNDO,
            (
                r" \((paired|Welch) test against the group's best cell\)",
                r" (\1 test against the group's leader)",
            ),
            (
                r' <span class="badge warn" title="other backbone: [^"]*">not like for like</span>',
                "",
            ),
        ),
        mask=((r"(rank, group</th><td class=\"num\">[^,<]*, )[^ <]+", r"\1G"),),
    ),
    Expected(
        pages=r"^(datasets/|index\.html$)",
        reason=(
            "issue 54: group 1 ('within noise of the best') follows the one rule; a row on another "
            "backbone than its pool (FedMAE) is flagged, also at 400 px"
        ),
        undo=(
            *WORDS_UNDO,
            (r'<br><span class="badge warn narrow-flag"[^>]*>[^<]*</span>', ""),
            (
                r'<br><span class="badge warn" title="other backbone: [^"]*">not like for like</span>',
                "",
            ),
            (
                r'<tr class="differs" data-f-method="fedmae">',
                '<tr class="" data-f-method="fedmae">',
            ),
            (
                r' <span class="badge warn">not like for like</span><br>'
                r'<span class="std flag">other backbone: [^<]*</span>',
                "",
            ),
        ),
        mask=((r" near\b", ""), (r" · within noise of the best", "")),
    ),
    Expected(
        pages=r"^methods/",
        reason=(
            "issue 54: a method page links the code that ran (its file at the records' commit, the "
            "lines changed since), an empty reference-page row says none, and FedMAE's rank is "
            "flagged for its backbone"
        ),
        undo=(
            *WORDS_UNDO,
            (r"(?s)\n<tr><th>code that ran</th>.*?</td></tr>", "\n"),
            (r" at the build's commit <code>", " at commit <code>"),
            (
                r' <span class="badge warn" title="other backbone: [^"]*">not like for like</span>',
                "",
            ),
            (
                r'<span class="none">none</span> <span class="muted">\(no page in docs/methods/[^)]*\)</span>',
                ' <span class="muted">(what the benchmark implements, and where it departs from the paper)</span>',
            ),
        ),
    ),
    Expected(
        pages=r"^compare\.html$",
        reason=(
            "issue 54: the compare table puts the verdict second, with each cell's "
            "not-like-for-like flag under it"
        ),
        drop=r'^<table id="compare-table">',
    ),
    Expected(
        pages=r"^csv/(?!margins\.csv$|paper-pairs\.csv$)",
        reason=(
            "issue 54: noise groups under the one rule, the backbone column, and FedMAE's "
            "'other backbone' flag"
        ),
        columns=("noise_group", "backbone", "differs"),
    ),
    Expected(
        pages=r".",
        reason="issue 54: a partition's short label has its meaning in words as its tooltip",
        undo=WORDS_UNDO,
    ),
    # Issue 49's layout (code moved, not changed), against main at d5ddcf3
    Expected(
        pages=r"^methods/no_pretrain_bn\.html$",
        reason=(
            "methods/calibrated_init.py is now methods/no_pretrain_bn.py: the page's source and "
            "file links name the method's file (no number moved)"
        ),
        undo=((r"\bno_pretrain_bn\.py\b", "calibrated_init.py"),),
    ),
    # Issue 58's layout (files moved, method files show their client step), against main at 96eacbf
    Expected(
        pages=r"^methods/(fedavg_simclr|fedema|fedu|pixels)\.html$",
        reason=(
            "issue 58: the method's file changed since the records' commit (its client step and "
            "loss call written in it; pixels' docstring names benchmark/building_blocks/), so the "
            "page says how much ('changed since'), and its summary is the edited docstring; no "
            "number moved"
        ),
        mask=((CODE_THAT_RAN, r"\1 (the file's state at the build's commit)"),),
        drop=r'^<table class="kv readme">',
    ),
    # Issue 58, item 3 for the other methods, against main at 29d59da
    Expected(
        pages=r"^methods/(central_ssl|local_ssl|dec_sl|no_pretrain)\.html$",
        reason=(
            "issue 58: central_ssl's and local_ssl's client step and loss call are written in "
            "their file, methods/baselines.py (dec_sl's and no_pretrain's file too), so the page "
            "says the file changed since the records' commit; no number moved"
        ),
        mask=((CODE_THAT_RAN, r"\1 (the file's state at the build's commit)"),),
    ),
    Expected(
        pages=r"^methods/flesd\.html$",
        reason=(
            "issue 58: FLESD's local loss call is written in methods/flesd.py, so the page says "
            "the file changed since the records' commit, and the link to the DEVIATION comment "
            "below the client step moved; no number moved"
        ),
        mask=((CODE_THAT_RAN, r"\1 (the file's state at the build's commit)"),),
        drop=r'^<table class="kv readme">',
    ),
)


def run(
    cmd: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, ok: Sequence[int] = (0,)
) -> None:
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode not in ok:
        raise SystemExit(
            f"failed ({proc.returncode}): {' '.join(cmd)} in {cwd}\n{proc.stdout}\n{proc.stderr}"
        )


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.setdefault("SOURCE_DATE_EPOCH", "1700000000")
    return env


def build_site(tree: Path, results: Path, out: Path) -> None:
    cmd = [sys.executable, "-m", "leaderboard", "build", "--results", str(results)]
    if (results / "reference").is_dir():
        cmd += ["--references", str(results / "reference")]
    run([*cmd, "--out", str(out)], cwd=tree, env=tree_env(tree))


def site_files(site: Path, suffix: str) -> dict[str, Path]:
    return {str(p.relative_to(site)): p for p in sorted(site.rglob(f"*{suffix}"))}


def tables(path: Path, commit: str = "") -> list[str]:
    """The page's ``<table>`` elements; the commit the site was built from (links into the
    repository name it) is written as ``COMMIT``, so that two trees' tables compare."""
    text = path.read_text(encoding="utf-8")
    if commit:
        text = text.replace(commit, "COMMIT").replace(commit[:12], "COMMIT")
    return TABLE.findall(text)


def explain(page: str, base: list[str], head: list[str]) -> str | None:
    """The reason of the first expected change that turns ``head``'s tables into ``base``'s, or
    None."""
    for exp in EXPECTED:
        if not re.search(exp.pages, page):
            continue
        kept_base, kept_head = base, head
        if exp.mask:
            kept_base, kept_head = _masked(kept_base, exp), _masked(kept_head, exp)
        if exp.drop:
            kept_base = [t for t in kept_base if not re.search(exp.drop, t)]
            kept_head = [t for t in kept_head if not re.search(exp.drop, t)]
        undone = []
        for table in kept_head:
            if re.search(exp.tables, table):
                for pattern, repl in exp.undo:
                    table = re.sub(pattern, repl, table)
            undone.append(table)
        kept = [
            t for t in kept_base if not (exp.gone and re.search(exp.gone, t) and t not in kept_head)
        ]
        if undone == kept:
            return exp.reason
    return None


def _masked(tables_: list[str], exp: Expected) -> list[str]:
    out = []
    for table in tables_:
        if re.search(exp.tables, table):
            for pattern, repl in exp.mask:
                table = re.sub(pattern, repl, table)
        out.append(table)
    return out


def new_page(page: str) -> str | None:
    """The reason of the expected change that adds ``page``, or None."""
    return next((e.reason for e in EXPECTED if e.new and re.search(e.new, page)), None)


def _csv_without(data: bytes, columns: Sequence[str]) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    if not rows:
        return rows
    keep = [i for i, name in enumerate(rows[0]) if name not in columns]
    return [[r[i] for i in keep if i < len(r)] for r in rows]


def explain_csv(name: str, base: bytes, head: bytes) -> str | None:
    """The reason of the expected change that explains a CSV difference (only its ``columns``
    differ), or None."""
    for exp in EXPECTED:
        if (
            exp.columns
            and re.search(exp.pages, name)
            and _csv_without(base, exp.columns) == _csv_without(head, exp.columns)
        ):
            return exp.reason
    return None


def first_difference(base: list[str], head: list[str]) -> str:
    a, b = "\n".join(base).splitlines(), "\n".join(head).splitlines()
    diff = list(difflib.unified_diff(a, b, "base", "head", lineterm="", n=0))
    return "\n".join(line[:300] for line in diff[:12])


def compare_sites(
    base: Path, head: Path, commits: tuple[str, str] = ("", "")
) -> tuple[list[str], list[str]]:
    """(failures, expected differences) over every page's tables and every CSV; ``commits``: the
    commit each site was built from."""
    failures: list[str] = []
    expected: list[str] = []
    pages_a, pages_b = site_files(base, ".html"), site_files(head, ".html")
    for page in sorted(set(pages_a) ^ set(pages_b)):
        why = new_page(page) if page in pages_b else None
        if why:
            expected.append(f"{page}: {why}")
        else:
            failures.append(f"page only in {'base' if page in pages_a else 'head'}: {page}")
    for page in sorted(set(pages_a) & set(pages_b)):
        ta, tb = tables(pages_a[page], commits[0]), tables(pages_b[page], commits[1])
        if ta == tb:
            continue
        why = explain(page, ta, tb)
        if why:
            expected.append(f"{page}: {why}")
        else:
            failures.append(f"tables differ: {page}\n{first_difference(ta, tb)}")
    csv_a, csv_b = site_files(base, ".csv"), site_files(head, ".csv")
    for name in sorted(set(csv_a) | set(csv_b)):
        if name not in csv_a or name not in csv_b:
            failures.append(f"CSV only in {'base' if name in csv_a else 'head'}: {name}")
        elif csv_a[name].read_bytes() != csv_b[name].read_bytes():
            why = explain_csv(name, csv_a[name].read_bytes(), csv_b[name].read_bytes())
            if why:
                expected.append(f"{name}: {why}")
            else:
                failures.append(f"CSV differs: {name}")
    return failures, expected


def run_grid(tree: Path, root: Path, cells: Sequence[str]) -> None:
    """The smoke grid and the chosen quickstart cells under ``root``. Exit 1 (some cell failed: a
    missing optional part, Detectron2 on a machine without it) is not a failure here: which cells
    failed, and why, is compared between the trees (:func:`compare_failures`)."""
    base = [sys.executable, "-m", "benchmark", "run", "--no-wandb", "--workers", "1"]
    run([*base, "--grid", "smoke", "--root", str(root)], cwd=tree, env=tree_env(tree), ok=(0, 1))
    for prefix in cells:
        only = ["--only", f"cell={prefix}"]
        run(
            [*base, "--grid", "quickstart", *only, "--root", str(root)],
            cwd=tree,
            env=tree_env(tree),
            ok=(0, 1),
        )


def failed_cells(root: Path) -> dict[str, str]:
    """cell id → the error type and first line of each cell that failed under ``root``."""
    out = {}
    for path in sorted(root.rglob("error.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        reason = str(data.get("reason", "")).strip()
        out[str(data.get("cell_id") or path.parent.name)] = (
            reason.splitlines()[0][:200] if reason else ""
        )
    return out


def compare_failures(base: Path, head: Path) -> tuple[list[str], list[str]]:
    """(failures, notes): a cell that failed in one tree only, or for another reason, is a failure;
    one that failed in both for the same reason is a note (it has no record in either)."""
    a, b = failed_cells(base), failed_cells(head)
    failures = [
        f"cell {c} failed in {'base' if c in a else 'head'} only: {a.get(c) or b.get(c)}"
        for c in sorted(set(a) ^ set(b))
    ]
    failures += [
        f"cell {c} failed for another reason: base {a[c]!r}, head {b[c]!r}"
        for c in sorted(set(a) & set(b))
        if a[c] != b[c]
    ]
    notes = [
        f"cell {c} failed in both trees: {a[c]}" for c in sorted(set(a) & set(b)) if a[c] == b[c]
    ]
    return failures, notes


def stable(obj: object) -> object:
    """``obj`` without the fields that depend on the machine or the moment."""
    if isinstance(obj, dict):
        return {
            k: stable(v)
            for k, v in obj.items()
            if k not in VOLATILE and not k.endswith("_time_s") and not k.endswith("_seconds")
        }
    if isinstance(obj, list):
        return [stable(v) for v in obj]
    return obj


def records(root: Path) -> Iterator[tuple[str, object]]:
    for path in sorted(root.rglob("record.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        yield str(data.get("cell_id") or path.parent.name), stable(data)


def compare_records(base: Path, head: Path) -> list[str]:
    a, b = dict(records(base)), dict(records(head))
    failures = [
        f"record only in {'base' if c in a else 'head'}: cell {c}" for c in sorted(set(a) ^ set(b))
    ]
    for cell in sorted(set(a) & set(b)):
        if a[cell] != b[cell]:
            ja = json.dumps(a[cell], indent=1, sort_keys=True).splitlines()
            jb = json.dumps(b[cell], indent=1, sort_keys=True).splitlines()
            diff = difflib.unified_diff(ja, jb, "base", "head", lineterm="", n=0)
            failures.append(f"record differs: cell {cell}\n" + "\n".join(list(diff)[:12]))
    if not a and not b:
        failures.append("no record was written by either tree")
    return failures


def head_commit(tree: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True)
    return out.stdout.strip()


def checkout(ref: str, where: Path) -> None:
    run(["git", "worktree", "add", "--detach", str(where), ref], cwd=HERE)


def remove_checkout(where: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=HERE, check=False)
    subprocess.run(["git", "worktree", "prune"], cwd=HERE, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, help="the git ref to compare with (e.g. main, bef0477)")
    p.add_argument(
        "--results", type=Path, default=HERE / "results", help="records (default results/)"
    )
    p.add_argument("--cells", nargs="*", default=[], help="quickstart cell id prefixes to run too")
    p.add_argument("--no-grid", action="store_true", help="compare the site only")
    p.add_argument("--no-site", action="store_true", help="compare the records only")
    p.add_argument("--keep", type=Path, help="keep the sites and run roots here")
    args = p.parse_args(argv)
    results = args.results.resolve()
    if not args.no_site and not results.is_dir():
        print(f"error: --results {results}: no such folder", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="layout-identity-"))
    out = args.keep.resolve() if args.keep else work
    base_tree = work / "base-tree"
    failures: list[str] = []
    expected: list[str] = []
    try:
        checkout(args.base, base_tree)
        trees = {"base": base_tree, "head": HERE}
        if not args.no_site:
            for name, tree in trees.items():
                shutil.rmtree(out / name / "site", ignore_errors=True)
                build_site(tree, results, out / name / "site")
            commits = (head_commit(base_tree), head_commit(HERE))
            f, e = compare_sites(out / "base" / "site", out / "head" / "site", commits)
            failures += f
            expected += e
        if not args.no_grid:
            for name, tree in trees.items():
                shutil.rmtree(out / name / "runs", ignore_errors=True)
                run_grid(tree, out / name / "runs", args.cells)
            failures += compare_records(out / "base" / "runs", out / "head" / "runs")
            f, notes = compare_failures(out / "base" / "runs", out / "head" / "runs")
            failures += f
            for line in notes:
                print(f"note: {line}")
    finally:
        remove_checkout(base_tree)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for line in expected:
        print(f"expected: {line}")
    for line in failures:
        print(f"DIFFERS: {line}")
    verdict = "identical" if not failures else f"{len(failures)} difference(s)"
    print(f"{verdict} (base {args.base}; {len(expected)} expected difference(s) listed above)")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
