"""Issue 54: a method page shows the code that ran — its file at the commit its records were made at,
what changed in it by the build's commit (lines, the diff's link), and the ``# DEVIATION`` lines of
that code, not of today's checkout."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from leaderboard.build import build_model
from leaderboard.method_views import _Shared, method_page, method_sources
from tests.leaderboard.lb_factory import make_record

URL = "https://github.com/example/fssl"

RAN = """from benchmark.core.registry import METHODS


# DEVIATION: the code that ran departs here
@METHODS.register("fedavg_simclr")
class FedAvgSimCLR:
    pass
"""
TODAY = """from benchmark.core.registry import METHODS

# a new comment
# another
import math


# DEVIATION: today's wording, on another line
@METHODS.register("fedavg_simclr")
class FedAvgSimCLR:
    scale = math.pi
"""


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: these tests build a small repository with its history")
    repo = tmp_path / "repo"
    (repo / "methods").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "methods" / "simclr.py").write_text(RAN)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "ran")
    ran = _git(repo, "rev-parse", "HEAD")
    (repo / "methods" / "simclr.py").write_text(TODAY)
    _git(repo, "commit", "-qam", "today")
    return repo, ran, _git(repo, "rev-parse", "HEAD")


def _page(tmp_path: Path, repo: Path, head: str, shas: list[str]) -> dict:
    (tmp_path / "results").mkdir(exist_ok=True)
    model = build_model([tmp_path / "results"])
    model.repo = repo
    model.build = {"commit": head, "repo_url": URL, "date": ""}
    recs = [
        dataclasses.replace(r, env=dataclasses.replace(r.env, git_sha=sha))
        for r, sha in zip(
            [make_record("fedavg_simclr", seed=s, value=70.0 + s) for s in range(len(shas))], shas
        )
    ]
    shared = _Shared(sources=method_sources(repo), tables=[], papers={}, blob=f"{URL}/blob/{head}")
    return method_page(model, shared, "fedavg_simclr", recs, {})


def test_the_page_links_the_records_commit_and_says_what_changed_since(
    tmp_path: Path, repo
) -> None:
    root, ran, head = repo
    page = _page(tmp_path, root, head, [ran, ran, ran])
    (c,) = page["record_commits"]
    assert c["n"] == 3 and c["known"]
    assert c["url"] == f"{URL}/blob/{ran}/methods/simclr.py"
    diff = subprocess.run(
        ["git", "-C", str(root), "diff", "--numstat", ran, head, "--", "methods/simclr.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\t")
    assert c["changed"]["added"] == int(diff[0]) > 0 and c["changed"]["deleted"] == int(diff[1])
    assert c["changed"]["url"] == f"{URL}/compare/{ran}...{head}"
    # the DEVIATION lines of the code that ran, linked at its commit — not today's
    (d,) = page["deviations"]
    assert d["where"] == "methods/simclr.py:4" and d["text"] == "the code that ran departs here"
    assert d["url"] == f"{URL}/blob/{ran}/methods/simclr.py#L4"
    assert page["deviations_at"] == ran[:12]


def test_an_unchanged_file_and_an_unknown_commit_are_told_apart(tmp_path: Path, repo) -> None:
    root, ran, head = repo
    same = _page(tmp_path, root, head, [head])
    assert same["record_commits"][0]["known"] and same["record_commits"][0]["changed"] is None
    # a record's git_sha is input: one this checkout lacks (or that is no sha at all) says nothing
    # about changes and is never passed to git as an option
    odd = _page(tmp_path, root, head, ["0" * 40, "--output=/tmp/x", ran])
    by_sha = {c["sha"]: c for c in odd["record_commits"]}
    assert not by_sha["0" * 40]["known"] and not by_sha["--output=/tmp/x"]["known"]
    assert by_sha["--output=/tmp/x"]["url"] is None and by_sha[ran]["changed"]
