"""Every command a documentation page cites exists (issue 57: seven method pages cited
``python -m benchmark expand --grid quickstart``, which does not): each ``python -m benchmark SUB``,
``python -m leaderboard SUB`` and ``python -m benchmark.commands.MODULE`` in README.md,
CONTRIBUTING.md, docs/ and methods/*.md runs its ``--help``, and every ``--flag`` the page gives
it is in that help. The pages are read the way tests/test_doc_paths.py reads them: inline code
spans and fenced blocks."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMAND = re.compile(
    r"python -m (benchmark(?:\.commands\.[a-z_]+)?|leaderboard)\b((?:[ \t]+(?:\\\n[ \t]*)?[^\s`|;&#]+)*)"
)
# a flag-shaped token of a command line (a placeholder such as --<flag> is not one)
FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")


def pages() -> list[Path]:
    out = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [*out, *sorted((REPO / "methods").glob("*.md"))]


def cited(text: str) -> list[tuple[str, str | None, list[str]]]:
    """(module, subcommand or None, flags) of every command line in ``text``."""
    out = []
    for m in COMMAND.finditer(text):
        words = m.group(2).replace("\\\n", " ").split()
        sub = None
        if (
            m.group(1) in ("benchmark", "leaderboard")
            and words
            and re.fullmatch(r"[a-z][a-z-]*", words[0])
        ):
            sub = words.pop(0)
        out.append(
            (m.group(1), sub, [w.split("=")[0] for w in words if FLAG.match(w.split("=")[0])])
        )
    return out


def _citations() -> dict[tuple[str, str | None], dict[str, set[str]]]:
    """(module, sub) -> {flag: pages citing it} (the empty flag "" for the command itself)."""
    out: dict[tuple[str, str | None], dict[str, set[str]]] = {}
    for page in pages():
        rel = str(page.relative_to(REPO))
        for module, sub, flags in cited(page.read_text(encoding="utf-8")):
            for flag in ["", *flags]:
                out.setdefault((module, sub), {}).setdefault(flag, set()).add(rel)
    return out


@cache
def help_text(module: str, sub: str | None) -> tuple[int, str]:
    """The exit status and output of ``python -m MODULE [SUB] --help`` (the two CLIs in this
    process, a module command in a child)."""
    args = [sub, "--help"] if sub else ["--help"]
    if module in ("benchmark", "leaderboard"):
        main = __import__(
            "benchmark.cli" if module == "benchmark" else "leaderboard.__main__", fromlist=["main"]
        ).main
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        return code, out.getvalue()
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout + proc.stderr


CITED = _citations()


@pytest.mark.parametrize(("module", "sub"), sorted(CITED, key=str))
def test_every_cited_command_exists_and_takes_its_flags(module: str, sub: str | None) -> None:
    code, text = help_text(module, sub)
    where = sorted(CITED[(module, sub)][""])
    assert code == 0, f"`python -m {module} {sub or ''}` cited in {where} has no --help:\n{text}"
    missing = {f: sorted(p) for f, p in CITED[(module, sub)].items() if f and f not in text}
    assert not missing, f"`python -m {module} {sub or ''}`: flags its --help lacks: {missing}"


def test_the_reader_finds_commands_subcommands_and_flags() -> None:
    text = (
        "run `python -m benchmark run --grid quickstart --add-method fedfoo --root runs`, then\n"
        "```\npython -m leaderboard build --results runs \\\n    --out site\n```\n"
        "and `python -m benchmark.commands.method_table --lock`; `python -m benchmark --version`"
    )
    assert cited(text) == [
        ("benchmark", "run", ["--grid", "--add-method", "--root"]),
        ("leaderboard", "build", ["--results", "--out"]),
        ("benchmark.commands.method_table", None, ["--lock"]),
        ("benchmark", None, ["--version"]),
    ]
    assert help_text("benchmark", "expand")[0] != 0  # the command issue 57 found cited
