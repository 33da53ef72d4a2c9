"""Mutation testing of the methods and partitioners (issue 55): does every plausible wrong
implementation fail a test?

    python scripts/mutation.py --list                       # the targets and their mutants
    python scripts/mutation.py featarc                      # run one target's mutants
    python scripts/mutation.py featarc shards --write-docs  # run, then refresh docs/mutation.md
    python scripts/mutation.py --only featarc:flip-targets  # one mutant
    python scripts/mutation.py easyfl --budget 300 --write-docs  # none starts after 300 s of mutants

The mutants are declared in ``scripts/mutants.py``: per target (one method or partitioner file) the
tests that pin it, and a list of mutants, each an exact snippet of the file (occurring exactly once)
and what it becomes. Each mutant is applied to a temporary copy of this tree (tracked and untracked,
not ignored, files; this tree is never touched), the target's tests run there with ``PYTHONPATH``
set to the copy, and the mutant is *killed* when they fail (or exceed ``--timeout``), *survived*
when they pass. A mutant declared ``equivalent`` (with its reason) is not run and not counted. The
unmutated copy runs the same tests first and must pass, otherwise the target is reported as broken.

Score = killed / (mutants - equivalent). Results are kept per target in
``scripts/mutation_results.json`` (with the commit, the date and the machine) and
``--write-docs`` renders docs/mutation.md from it (and the summary table of
docs/official-code.md). The run is CPU-heavy (each mutant starts pytest)
and is not part of the test suite; tests/test_mutants.py checks only that every declared mutant
still applies to the code.

Exit 0 when every run mutant was killed, 1 when one survived or a baseline failed, 2 on a usage
error. Standard library and git only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "scripts" / "mutation_results.json"
DOC = REPO / "docs" / "mutation.md"
OFFICIAL = REPO / "docs" / "official-code.md"  # its summary table sits between these markers
START, END = "<!-- mutation-scores: start -->", "<!-- mutation-scores: end -->"
COMMAND = "python scripts/mutation.py TARGET --write-docs"


def load_targets() -> dict:
    """The declared targets of ``scripts/mutants.py`` (name -> Target)."""
    spec = importlib.util.spec_from_file_location("fssl_mutants", REPO / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.TARGETS


def check_applicable(targets: dict, root: Path = REPO) -> list[str]:
    """Every problem with the declarations: a file missing, an original that does not occur exactly
    once, a mutant equal to its original, a duplicate id, a test file missing."""
    problems = []
    for name, t in targets.items():
        path = root / t.file
        if not path.is_file():
            problems.append(f"{name}: no file {t.file}")
            continue
        text = path.read_text(encoding="utf-8")
        ids = [m.id for m in t.mutants]
        if len(ids) != len(set(ids)):
            problems.append(f"{name}: duplicate mutant ids")
        for m in t.mutants:
            n = text.count(m.original)
            if n != 1:
                problems.append(f"{name}:{m.id}: the original occurs {n} times in {t.file}")
            if m.original == m.mutant:
                problems.append(f"{name}:{m.id}: the mutant equals its original")
            for test in m.tests or t.tests:
                if not (root / test.split("::")[0]).is_file():
                    problems.append(f"{name}:{m.id}: no test file {test.split('::')[0]}")
    return problems


def copy_tree(dest: Path) -> None:
    """This tree's tracked and untracked (not ignored) files into ``dest``."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    for rel in out.decode().split("\0"):
        if not rel:
            continue
        src = REPO / rel
        if not src.is_file():  # deleted in the work tree
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def env_for(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(copy),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'timeout', seconds, last output lines) of the tests run in ``copy``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o"]
    cmd += ["addopts=", *tests]
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            cmd, cwd=copy, env=env_for(copy), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    lines = (p.stdout + p.stderr).strip().splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    tail = failed[0] if failed else "\n".join(lines[-3:])
    if p.returncode == 5:  # no test collected: a declaration error, not a kill
        raise SystemExit(f"no test collected by {tests}: {tail}")
    return ("pass" if p.returncode == 0 else "fail"), time.monotonic() - t0, tail


def imports_from(copy: Path, target_file: str) -> bool:
    """The copy's module is the one imported (an editable install must not win)."""
    module = target_file[: -len(".py")].replace("/", ".")
    code = f"import {module} as m, sys; print(m.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=copy, env=env_for(copy), capture_output=True, text=True
    )
    return out.returncode == 0 and Path(out.stdout.strip()).resolve().is_relative_to(copy.resolve())


def run_target(
    name: str, t, only: set[str] | None, timeout: float, progress=None, budget: float = 0.0
) -> dict:
    """Baseline, then every selected non-equivalent mutant of ``t``; its result record.
    ``progress(record)`` is called after each mutant (a long run keeps what it measured). With a
    ``budget`` (seconds, 0 = none) no mutant starts once the mutants have run that long (the
    baseline not counted): the rest are left out of the record and the tables say how many were not
    run."""
    mutants = [m for m in t.mutants if only is None or m.id in only]
    with tempfile.TemporaryDirectory(prefix=f"mut-{name}-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        if not imports_from(copy, t.file):
            raise SystemExit(f"{name}: {t.file} is not imported from the copy (check PYTHONPATH)")
        tests_used = sorted({x for m in mutants if not m.equivalent for x in (m.tests or t.tests)})
        base, secs, tail = run_tests(copy, tests_used, timeout)
        print(f"[{name}] baseline {base} ({secs:.0f} s)", flush=True)
        if base != "pass":
            return {"baseline": base, "baseline_tail": tail, "mutants": {}}
        path = copy / t.file
        original_text = path.read_text(encoding="utf-8")
        rows = {}
        started = time.monotonic()
        for m in mutants:
            if m.equivalent:
                rows[m.id] = {"status": "equivalent", "reason": m.equivalent}
                continue
            if budget and time.monotonic() - started > budget:
                print(f"[{name}] {m.id}: not run (budget of {budget:.0f} s spent)", flush=True)
                continue
            path.write_text(original_text.replace(m.original, m.mutant, 1), encoding="utf-8")
            try:
                res, secs, tail = run_tests(copy, list(m.tests or t.tests), timeout)
            finally:
                path.write_text(original_text, encoding="utf-8")
            status = {"pass": "survived", "fail": "killed", "timeout": "killed (timeout)"}[res]
            rows[m.id] = {"status": status, "seconds": round(secs, 1)}
            if res == "fail":
                rows[m.id]["by"] = tail.splitlines()[-1][:300] if tail else ""
            print(f"[{name}] {m.id}: {status} ({secs:.0f} s)", flush=True)
            if progress is not None:
                progress({"baseline": "pass", "mutants": dict(rows)})
    return {"baseline": "pass", "mutants": rows}


def score(rows: dict) -> tuple[int, int, int]:
    """(killed, survived, equivalent) of a target's results."""
    st = [r["status"] for r in rows.values()]
    killed = sum(s.startswith("killed") for s in st)
    return killed, st.count("survived"), st.count("equivalent")


def git_head() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True)
    # the files this script writes do not make the tree dirty
    mine = [f":!{p.relative_to(REPO)}" for p in (RESULTS, DOC, OFFICIAL)]
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", ".", *mine], cwd=REPO, capture_output=True
    ).stdout
    return out.stdout.decode().strip() + ("+dirty" if dirty.strip() else "")


def score_table(targets: dict, results: dict) -> list[str]:
    """The markdown table of one row per target."""
    lines = [
        "| target | file | mutants | equivalent | killed | survived | score | measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in targets.items():
        r = results.get(name)
        n = len(t.mutants)
        n_eq = sum(1 for m in t.mutants if m.equivalent)
        if not r or r.get("baseline") != "pass":
            row = f"| `{name}` | `{t.file}` | {n} | {n_eq} | - | - | not measured | - |"
        else:
            # the declarations as they are now: a row of a mutant since declared equivalent, or no
            # longer declared, is not counted
            rows = {m.id: r["mutants"][m.id] for m in t.mutants if m.id in r["mutants"]}
            rows.update({m.id: {"status": "equivalent"} for m in t.mutants if m.equivalent})
            k, s, _ = score(rows)
            ran = k + s
            pct = f"{100 * k / ran:.0f} %" if ran else "-"
            missing = n - n_eq - ran
            note = f" ({missing} not run)" if missing else ""
            when = f"{r['date']}, `{r['commit']}`, {r['machine']}"
            row = f"| `{name}` | `{t.file}` | {n} | {n_eq} | {k} | {s} | {pct}{note} | {when} |"
        lines.append(row)
    return lines


def splice(text: str, lines: list[str]) -> str:
    """``text`` with the block between the OFFICIAL markers replaced by ``lines``."""
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{OFFICIAL.relative_to(REPO)}: no {START} ... {END} block")
    return head + START + "\n" + "\n".join(lines) + "\n" + END + tail


def render_doc(targets: dict, results: dict) -> str:
    """docs/mutation.md: the score table, then every mutant with its status."""
    lines = [
        "# Mutation scores",
        "",
        "<!-- generated by scripts/mutation.py --write-docs from scripts/mutation_results.json;",
        "     do not edit by hand -->",
        "",
        "A mutant is a small, plausible wrong implementation of one method or partitioner (declared",
        "in `scripts/mutants.py`: an exact snippet of the file and what it becomes). It is *killed*",
        "when the tests that pin the target fail on it. Score = killed / (mutants - equivalent); an",
        "equivalent mutant changes no behaviour and is listed with the reason. The run is not part",
        "of the test suite (each mutant starts pytest); to re-make a target's row:",
        "",
        "```",
        COMMAND,
        "```",
        "",
        "(`--list` names the targets; `--only TARGET:ID` runs one mutant and merges its row into",
        "the target's; `--budget S` starts no mutant after S seconds of mutants). A target marked",
        "*not measured* has declared mutants that were not run for this table; a score with *(n not",
        "run)* counts only the mutants that ran.",
        "",
        *score_table(targets, results),
    ]
    lines += ["", "## Mutants", ""]
    for name, t in targets.items():
        rows = (results.get(name) or {}).get("mutants", {})
        lines += [f"### `{name}`", "", f"Tests: {', '.join(f'`{x}`' for x in t.tests)}", ""]
        lines += ["| id | what it breaks | status |", "|---|---|---|"]
        for m in t.mutants:
            st = rows.get(m.id, {}).get("status", "not run")
            if m.equivalent:
                st = f"equivalent: {m.equivalent}"
            by = rows.get(m.id, {}).get("by", "")
            by = by.split()[1] if by.startswith(("FAILED ", "ERROR ")) else ""
            extra = f" by `{by}`" if by and st.startswith("killed") else ""
            lines.append(f"| `{m.id}` | {m.what} | {st}{extra} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="targets to run (default: none; see --list)")
    ap.add_argument("--list", action="store_true", help="list the targets and their mutants")
    ap.add_argument("--check", action="store_true", help="check every mutant still applies")
    ap.add_argument("--only", nargs="*", default=[], metavar="TARGET:ID", help="run these mutants")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per test run")
    ap.add_argument("--write-docs", action="store_true", help="record and render docs/mutation.md")
    ap.add_argument(
        "--budget",
        type=float,
        default=0.0,
        help="seconds of mutants (after the baseline) after which none starts (0: none)",
    )
    args = ap.parse_args(argv)
    targets = load_targets()
    if args.list:
        for name, t in targets.items():
            print(f"{name} ({t.file}; tests: {' '.join(t.tests)})")
            for m in t.mutants:
                flag = f"  [equivalent: {m.equivalent}]" if m.equivalent else ""
                print(f"  {m.id}: {m.what}{flag}")
        return 0
    problems = check_applicable(targets)
    if problems or args.check:
        print("\n".join(problems) or "every mutant applies")
        return 1 if problems else 0
    only: dict[str, set[str]] = {}
    for spec in args.only:
        tname, _, mid = spec.partition(":")
        only.setdefault(tname, set()).add(mid)
    names = list(dict.fromkeys([*args.targets, *only]))
    unknown = [n for n in names if n not in targets]
    if unknown or (not names and not args.write_docs):
        print(
            f"unknown target(s) {unknown}; choose from {sorted(targets)}"
            if unknown
            else "name a target (or --list)",
            file=sys.stderr,
        )
        return 2
    bad = False
    for name in names:
        sel = only.get(name) if name not in args.targets else None
        progress = None
        where = stamp()  # the commit the copy is made from, not the one at the end of the run
        if args.write_docs:

            def progress(
                partial: dict, name: str = name, sel: set[str] | None = sel, where=where
            ) -> None:
                record(targets, {name: {**partial, **where}}, merge=sel is not None)

        r = run_target(name, targets[name], sel, args.timeout, progress, args.budget)
        k, s, e = score(r["mutants"])
        print(f"[{name}] killed {k}, survived {s}, equivalent {e}", flush=True)
        bad |= r["baseline"] != "pass" or s > 0
        if args.write_docs and r["baseline"] == "pass":
            record(targets, {name: {**r, **where}}, merge=sel is not None)
        elif args.write_docs and sel is None:
            record(targets, {name: {**r, **where}})
    if args.write_docs and not names:
        record(targets, {})
    return 1 if bad else 0


def stamp() -> dict[str, str]:
    """Where and when a result was measured."""
    return {
        "commit": git_head(),
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
    }


def record(targets: dict, new: dict, merge: bool = False) -> None:
    """Merge ``new`` into the results file (re-read now: another run may have written it) and
    re-render docs/mutation.md. ``merge`` (an ``--only`` run): the new mutants' rows replace theirs
    in the target's record and the others stay; each row carries the commit it was measured on."""
    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.is_file() else {}
    for name, rec in new.items():
        for row in rec.get("mutants", {}).values():
            row.setdefault("commit", rec.get("commit"))
        old = results.get(name)
        if merge and old and old.get("baseline") == "pass":
            rec = {**rec, "mutants": {**old.get("mutants", {}), **rec["mutants"]}}
        results[name] = rec
    # the declarations as they are now: a run started before a target was added keeps its row
    targets = load_targets()
    results = {k: v for k, v in results.items() if k in targets}
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    DOC.write_text(render_doc(targets, results), encoding="utf-8")
    text = OFFICIAL.read_text(encoding="utf-8")
    OFFICIAL.write_text(splice(text, score_table(targets, results)), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
