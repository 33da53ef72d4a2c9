#!/usr/bin/env python3
"""Prepare fssl-bench's dependencies as wheels for a GPU machine that has PyTorch but no network.

Run it on a machine with the package index; carry the folder it writes to the GPU machine; install
there with ``pip install --no-index`` (docs/performance.md, "On a GPU: a machine without network";
scripts/gpu-check.sh does that and runs the check). Stdlib only, plus pip.

    python scripts/prepare_wheels.py --python 3.12 [--platform manylinux_2_28_x86_64 ...]
        [--have FILE] [--skip wandb] [--extras detection] [--detectron2] [--out .whl]

What it downloads: the project's dependencies (pyproject.toml) and the chosen extras, and everything
they need, for the target Python and platform (``pip download --only-binary=:all: --platform ...
--python-version ...``), one distribution at a time without pip's resolver (``--no-deps``), each
one's ``Requires-Dist`` read from its wheel and followed, with the target's markers. Left out: torch
and torchvision (the GPU machine has the PyTorch build that matches its driver; a wheel from here
would replace it) and every distribution ``--have`` names (a file of names, one a line, or ``pip
list --format=freeze`` output from the target: what is already installed there) whose version there
satisfies what needs it (a bare name is taken to; a copy that does not is carried, and said) or ``--skip``
names (W&B: ``doctor --calibrate`` never logs, and wandb brings 20 MiB). ``--detectron2``
also builds Detectron2 0.5 as a Python-only wheel (scripts/install-detectron2-cpu.sh --wheel-dir;
its box and mask ops come from torchvision, on the GPU too) and adds what it needs; building it
needs torch here. The folder gets ``requirements.txt`` (what to install there) and ``SHA256SUMS``.

Exit code: 0 done; 1 a distribution has no wheel for the target (named; try another --platform:
pip matches manylinux_2_N exactly); 2 usage.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what every GPU machine brings with its PyTorch build (never carried)
TORCH_FAMILY = {"torch", "torchvision", "triton"}
# pip matches manylinux_2_N exactly: name the common ones (scripts/gpu-check.sh's machine: glibc 2.35)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _packaging():
    try:
        from packaging.markers import Marker
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.markers import Marker
        from pip._vendor.packaging.requirements import Requirement
    return Requirement, Marker


def _strip_comment(line: str) -> str:
    """A TOML line without its comment (a ``#`` outside a quoted string)."""
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return line[:i]
    return line


def project_requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The dependencies and the chosen extras of pyproject.toml (tomllib where Python has it, 3.11
    on; else a plain reader of its lists, so that Python 3.10 needs no tomli)."""
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        deps, optional = list(project["dependencies"]), project.get("optional-dependencies", {})
        missing = [e for e in extras if e not in optional]
        if missing:
            raise SystemExit(f"error: pyproject.toml has no extra {missing[0]!r}")
        return deps + [r for e in extras for r in optional[e]]
    text = "\n".join(_strip_comment(line) for line in text.splitlines())

    def block(key: str) -> list[str] | None:
        m = re.search(rf"(?m)^{re.escape(key)}\s*=\s*\[(.*?)\]", text, re.DOTALL)
        return re.findall(r'"([^"]+)"', m.group(1)) if m else None

    out = list(block("dependencies") or [])
    for extra in extras:
        found = block(extra)
        if found is None:
            raise SystemExit(f"error: pyproject.toml has no extra {extra!r}")
        out += found
    return out


def have_versions(path: Path | None) -> dict[str, str | None]:
    """What the target has: name -> version (``pip list --format=freeze`` lines) or None (a bare
    name, taken to satisfy any requirement)."""
    if path is None:
        return {}
    out: dict[str, str | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name = canonical(re.split(r"[=<>!~ @\[;]", line, maxsplit=1)[0])
            m = re.match(r"[^=<>!~ @\[;]+==([^\s;]+)", line)
            out[name] = m.group(1) if m else None
    return out


def have_names(path: Path | None) -> set[str]:
    return set(have_versions(path))


def satisfied(req, have: dict[str, str | None]) -> bool:
    """The target's own copy satisfies ``req`` (a copy of unknown version is taken to)."""
    name = canonical(req.name)
    if name not in have:
        return False
    return have[name] is None or req.specifier.contains(have[name], prereleases=True)


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def applies(req, env: dict[str, str]) -> bool:
    """The requirement's marker holds on the target with no extra asked for."""
    return req.marker is None or req.marker.evaluate({**env, "extra": ""})


def target_env(python: str) -> dict[str, str]:
    return {
        "python_version": ".".join(python.split(".")[:2]),
        "python_full_version": python if python.count(".") == 2 else python + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


def _run_pip(*cmd: str) -> bool:
    """pip, quietly: a miss is normal here (an sdist-only distribution is then built)."""
    proc = subprocess.run([sys.executable, "-m", "pip", *cmd, "-q"], capture_output=True, text=True)
    return proc.returncode == 0


def download(spec: str, args: argparse.Namespace) -> Path | None:
    """One distribution's wheel for the target (no dependencies): from the index, else built here
    from its source when it is pure Python (a ``none-any`` wheel runs anywhere); None otherwise."""
    Requirement, _ = _packaging()
    name = canonical(Requirement(spec).name)

    def mine() -> Path | None:
        return next(
            (w for w in args.out.glob("*.whl") if canonical(w.name.split("-")[0]) == name), None
        )

    platforms = [f"--platform={p}" for p in args.platform]
    if _run_pip(
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        args.python,
        "--implementation",
        "cp",
        *platforms,
        "--find-links",
        str(args.out),
        "-d",
        str(args.out),
        spec,
    ):
        return mine()
    if _run_pip("wheel", "--no-deps", "-w", str(args.out), spec):
        wheel = mine()
        if wheel is not None and wheel.name.endswith("-none-any.whl"):
            return wheel
        if wheel is not None:
            wheel.unlink()
    return None


def closure(
    top: list[str], args: argparse.Namespace, skip: set[str], have: dict[str, str | None]
) -> list[str]:
    """Download ``top`` and everything it needs on the target, but what ``skip`` names and what the
    target's own copies satisfy (a copy too old or too new for a requirement is replaced: its wheel
    is carried); the distributions that had no wheel."""
    Requirement, _ = _packaging()
    env = target_env(args.python)
    todo, seen, missing = list(top), set(), []
    while todo:
        req = Requirement(todo.pop(0))
        name = canonical(req.name)
        if name in seen or name in skip or not applies(req, env) or satisfied(req, have):
            continue
        if name in have:
            print(f"  the target's {name} {have[name]} does not satisfy {req}: carried")
        seen.add(name)
        wheel = download(str(req).split(";")[0], args)
        if wheel is None:
            missing.append(str(req))
            continue
        print(f"  {wheel.name}")
        todo += [r for r in requires_dist(wheel) if canonical(Requirement(r).name) not in seen]
    return missing


def detectron2_wheel(out: Path) -> Path | None:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-detectron2-cpu.sh"), "--wheel-dir", str(out)]
    )
    return next(iter(sorted(out.glob("detectron2*.whl"))), None) if proc.returncode == 0 else None


def finish(out: Path, top: list[str]) -> None:
    (out / "requirements.txt").write_text("\n".join(top) + "\n", encoding="utf-8")
    sums = [
        f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}" for w in sorted(out.glob("*.whl"))
    ]
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n", encoding="utf-8")
    size = sum(w.stat().st_size for w in out.glob("*.whl"))
    print(f"{len(sums)} wheels, {size / 2**20:.1f} MiB in {out}")
    print(f"carry {out} to the GPU machine and install there (no network):")
    print(
        f"  python3 -m pip install --no-index --find-links {out.name} -r {out.name}/requirements.txt"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="the target's Python, e.g. 3.12")
    ap.add_argument(
        "--platform",
        action="append",
        default=None,
        help=f"(repeatable) default: {' '.join(PLATFORMS)}",
    )
    ap.add_argument(
        "--have",
        type=Path,
        default=None,
        help="names the target already has (pip list --format=freeze)",
    )
    ap.add_argument(
        "--extras", default="detection", help="comma-separated extras (default: detection)"
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated distributions not to carry, e.g. wandb (doctor --calibrate never logs)",
    )
    ap.add_argument(
        "--detectron2", action="store_true", help="also build a Python-only Detectron2 wheel"
    )
    ap.add_argument(
        "--out", type=Path, default=Path(".whl"), help="the wheel folder (default .whl)"
    )
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+(\.\d+)?", args.python):
        ap.error(f"--python must look like 3.12, got {args.python!r}")
    args.platform = args.platform or list(PLATFORMS)
    args.out.mkdir(parents=True, exist_ok=True)
    return prepare(args)


def prepare(args: argparse.Namespace) -> int:
    Requirement, _ = _packaging()
    have = have_versions(args.have)
    skip = TORCH_FAMILY | {canonical(n) for n in args.skip.split(",") if n}
    extras = [e for e in args.extras.split(",") if e.strip()]
    wanted = project_requirements(REPO / "pyproject.toml", extras)
    for req in map(Requirement, wanted):
        if canonical(req.name) in TORCH_FAMILY and not satisfied(req, have):
            print(f"warning: the target's {req.name} {have.get(canonical(req.name))} is not {req}")
    top = [r for r in wanted if canonical(Requirement(r).name) not in skip]
    built: set[str] = set()  # wheels built here, not downloaded
    if args.detectron2:
        wheel = detectron2_wheel(args.out)
        if wheel is None:
            print(
                "error: the Detectron2 wheel could not be built (needs torch here)", file=sys.stderr
            )
            return 1
        built.add(canonical(wheel.name.split("-")[0]))  # detectron2-cdo, the source it came from
        top += [*sorted(built), *requires_dist(wheel)]
    print(f"downloading for CPython {args.python} on {', '.join(args.platform)}")
    print(f"never carried: {', '.join(sorted(skip))}; the target's own copies kept where they fit")
    missing = closure(top, args, skip | built, have)
    env = target_env(args.python)
    names = dict.fromkeys(canonical(req.name) for req in map(Requirement, top) if applies(req, env))
    finish(args.out, [n for n in names if n not in skip and n not in have])
    if missing:
        print(
            f"no wheel for the target: {', '.join(missing)} (try another --platform)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
