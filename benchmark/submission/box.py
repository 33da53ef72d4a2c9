"""The box: where a submitted method's code runs at ``accept`` (docs/integrity.md).

A call into a method's code (importing a plugin, re-training a cell) runs in a freshly executed
Python child (``python -m benchmark.submission.box_child``: never a fork of the process that holds
the data) inside Linux namespaces made by bubblewrap:

- a read-only view of the Python installation (interpreter, standard library, site-packages with
  the plugins) and of the harness's own packages (``benchmark``, ``methods``, ``tasks``), nothing
  else of the file system: no dataset caches or data roots, not the embedded data's source files
  (scikit-learn's ``datasets/data``), not the results folder, the extracted bundle or any other
  bundle, not the maintainer's home;
- no network (``--unshare-net``), its own PID namespace that dies with the parent
  (``--unshare-pid --die-with-parent``), a new session;
- its own scratch folder (``/box``) as working directory and home, and an environment built from
  nothing (``--clearenv``): no W&B key, no Hugging Face token, no data root;
- limits the child sets on itself before any submitted code runs (address space, CPU time, file
  size, processes), and a wall-clock deadline the parent enforces by killing the child's whole
  process group (the PID namespace dies with it).

The child is handed exactly what the job gives it (``payload``: the clients' images, labels only
for a method that declares them), and the parent trusts only the result file the child writes,
which it reads bounded and validates: a child that exits without one, whatever its exit code, is
a refusal in one line (:class:`BoxRefused`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

BWRAP = "/usr/bin/bwrap"
BOX = "/box"  # the child's scratch folder, working directory and home, as it sees it
RESULT_FILE = "result.json"
JOB_FILE = "job.json"
PAYLOAD_FILE = "payload.pt"
TRAINED = "trained.pt"  # the re-trained final state the child leaves in out/ for the parent
MAX_RESULT_BYTES = 1 << 20  # the result file the parent reads (a checkpoint travels beside it)
GIB = 1 << 30

# environment variables handed through (kernel and thread settings: the training's arithmetic);
# everything else (credentials, data roots, proxies) stays outside
PASSED_ENV_PREFIXES = ("OMP_", "MKL_", "ONEDNN_", "DNNL_", "ATEN_", "KMP_", "OPENBLAS_")
PASSED_ENV = ("LANG", "LC_ALL", "TZ", "FSSL_CELL_THREADS")


class BoxRefused(Exception):
    """The boxed child gave no valid result: one line, why."""


@dataclass(frozen=True)
class BoxLimits:
    """What one boxed child may use. The child sets the first four on itself (hard limits) before
    any submitted code is imported; the parent kills it at ``wall_s``."""

    address_space_bytes: int = 24 * GIB  # torch maps far more than it touches
    cpu_s: int = 4 * 3600
    file_bytes: int = 4 * GIB
    processes: int = 4096  # threads count: torch's pools
    wall_s: float = 3600.0


DEFAULT_BOX_LIMITS = BoxLimits()


@lru_cache(maxsize=1)
def box_unavailable() -> str | None:
    """Why no box can run here (no bubblewrap, no user namespaces, another OS), or None."""
    if not sys.platform.startswith("linux"):
        return f"the box needs Linux namespaces (this is {sys.platform})"
    if not os.path.exists(BWRAP):
        return f"bubblewrap is not installed ({BWRAP}; Debian: apt-get install bubblewrap)"
    try:
        done = subprocess.run(
            [BWRAP, "--unshare-all", "--die-with-parent", *_system_binds(), "/usr/bin/true"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot make namespaces here: {why[-1] if why else done.returncode}"
    return None


def _system_binds() -> list[str]:
    """/usr and the merged-/usr links, read-only."""
    out = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = Path("/") / name
        if path.is_symlink():
            out += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            out += ["--ro-bind", str(path), str(path)]
    return out


def hidden_paths(
    extra: Iterable[Path | str | None] = (), *, embedded_data: bool = False
) -> list[Path]:
    """What the box must not show even where it lies inside a path it binds: the data roots and
    caches, the embedded data's source files (unless ``embedded_data``: ``check-method``'s digits),
    the results folder, plus ``extra`` (the bundle, the --results folder)."""
    from benchmark.core.paths import RESULTS
    from benchmark.data.datasets import default_data_root

    out: list[Path | str | None] = [default_data_root(), RESULTS, *extra]
    out += [os.environ.get(k) for k in ("HF_HOME", "HF_DATASETS_CACHE", "TORCH_HOME")]
    out.append(Path.home() / ".cache")
    try:  # scikit-learn's data files (the digits dataset is one of them)
        if embedded_data:
            raise ImportError
        import importlib.util

        spec = importlib.util.find_spec("sklearn")
        if spec is not None and spec.submodule_search_locations:
            out += [Path(p) / "datasets" / "data" for p in spec.submodule_search_locations]
    except (ImportError, ValueError):
        pass
    return [Path(p).resolve() for p in out if p]


def _code_paths(hidden: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """(paths bound read-only, the child's PYTHONPATH): the interpreter's installation, every
    import path of this process that holds none of the ``hidden`` paths, the temporary folder
    (where bundles are extracted) or the repository (which holds results/), and the repository's
    own packages bound one by one."""
    from benchmark.core.paths import REPO

    repo = REPO.resolve()
    above = {repo, Path(tempfile.gettempdir()).resolve(), Path.home().resolve(), *hidden}
    binds: list[Path] = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    pythonpath: list[str] = []
    for name in ("benchmark", "methods", "tasks"):
        if (repo / name).is_dir():
            binds.append(repo / name)
    pythonpath.append(str(repo))
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        path = Path(entry).resolve()
        if any(path == h or path in h.parents for h in above) or any(
            h in path.parents for h in hidden
        ):
            continue  # a folder that holds what the box hides (the repository holds results/)
        binds.append(path)
        pythonpath.append(str(path))
    return binds, pythonpath


def _bwrap_argv(scratch: Path, hidden: Sequence[Path]) -> list[str]:
    binds, pythonpath = _code_paths(hidden)
    argv = [
        BWRAP,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup
        "--die-with-parent",
        "--new-session",
        *_system_binds(),
    ]
    seen: set[Path] = set()
    for path in sorted(set(binds), key=lambda p: len(p.parts)):
        if path in seen or not path.exists() or str(path).startswith("/usr/"):
            continue
        seen.add(path)
        argv += ["--ro-bind", str(path), str(path)]
    for path in hidden:  # over a bound path: an empty folder, or an empty file
        if any(path == b or b in path.parents for b in seen | {Path("/usr")}) and path.exists():
            argv += (
                ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
            )
    argv += ["--proc", "/proc", "--dev", "/dev", "--bind", str(scratch), BOX, "--chdir", BOX]
    argv.append("--clearenv")
    for k, v in sorted(_child_env(BOX, pythonpath).items()):
        argv += ["--setenv", k, v]
    return argv


def _child_env(home: str, pythonpath: Sequence[str]) -> dict[str, str]:
    """The child's whole environment: no credentials, no data root, no proxy."""
    env = {
        "HOME": home,
        "TMPDIR": f"{home}/tmp",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(pythonpath),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    env.update(
        {
            k: v
            for k, v in os.environ.items()
            if k.startswith(PASSED_ENV_PREFIXES) or k in PASSED_ENV
        }
    )
    return env


def run_boxed(
    job: Mapping[str, Any],
    payload: Mapping[str, Any] | None = None,
    *,
    what: str,
    hidden: Iterable[Path | str | None] = (),
    limits: BoxLimits = DEFAULT_BOX_LIMITS,
    keep: Sequence[str] = (),
    into: Path | None = None,
    unboxed: bool = False,
    keep_optional: Sequence[str] = (),
    embedded_data: bool = False,
    child: str = "benchmark.submission.box_child",
) -> dict[str, Any]:
    """Run ``job`` (``benchmark.submission.box_child``) in the box, handing it ``payload``
    (tensors and plain values, written with ``torch.save``), and return the result it wrote: a
    JSON object, read bounded. The files named in ``keep`` (relative names inside the child's
    ``out/``) are moved into ``into``, and those of ``keep_optional`` the child wrote (plain files). ``what`` names the work in the refusal line.

    ``unboxed`` (the maintainer's ``accept --unboxed`` where no box can run): the same fresh child,
    limits, scratch folder, bare environment and deadline, without the namespaces: it can see
    whatever this user can. ``embedded_data``: the box shows the embedded data's source files
    (scikit-learn's, the digits of ``check-method``), nothing else of the data. ``child``: the
    module run as the child (``box_child``, or a later layer's that serves its own jobs through
    ``box_child.serve``)."""
    why = box_unavailable()
    if why is not None and not unboxed:
        raise BoxRefused(f"{what}: no box can run here: {why}")
    scratch = Path(tempfile.mkdtemp(prefix="fssl-box-"))
    try:
        (scratch / "out").mkdir()
        (scratch / "tmp").mkdir()
        (scratch / JOB_FILE).write_text(
            json.dumps({**job, "limits": asdict(limits)}), encoding="utf-8"
        )
        if payload is not None:
            import torch

            torch.save(dict(payload), scratch / PAYLOAD_FILE)
        command = [sys.executable, "-B", "-m", child]
        if why is None:
            shown = hidden_paths(hidden, embedded_data=embedded_data)
            argv, env = [*_bwrap_argv(scratch, shown), *command, BOX], None
        else:
            argv, env = [*command, str(scratch)], _child_env(str(scratch), _code_paths([])[1])
        code, elapsed = _run(argv, scratch, limits.wall_s, what, env)
        result = _read_result(scratch, code, what)
        for name in keep:
            src = scratch / "out" / name
            if into is None or not src.is_file() or src.is_symlink():
                raise BoxRefused(f"{what}: the boxed child wrote no {name}")
            shutil.move(str(src), str(Path(into) / name))
        for name in keep_optional:
            src = scratch / "out" / name
            if into is not None and src.is_file() and not src.is_symlink():
                shutil.move(str(src), str(Path(into) / name))
        result["box_wall_s"] = elapsed
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(
    argv: list[str], scratch: Path, wall_s: float, what: str, env: dict[str, str] | None
) -> tuple[int, float]:
    """Start the child in its own process group, wait for it until ``wall_s``, then kill the whole
    group. Returns (exit code, seconds)."""
    t0 = time.monotonic()
    with open(scratch / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(  # argv is built here, not from outside
            argv,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,
            cwd=scratch,
            env=env,
        )
        try:
            code = proc.wait(timeout=wall_s)
        except BaseException:  # a deadline, or the maintainer's Ctrl-C: the group goes with it
            _kill_group(proc)
            if time.monotonic() - t0 >= wall_s:
                raise BoxRefused(
                    f"{what}: the boxed child did not finish within {wall_s:g} s (killed)"
                ) from None
            raise
        _kill_group(proc)  # anything it left behind in its group
    return code, time.monotonic() - t0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_result(scratch: Path, code: int, what: str) -> dict[str, Any]:
    from benchmark.core.terminal import printable

    path = scratch / "out" / RESULT_FILE
    if path.is_symlink() or not path.is_file():
        tail = _stderr_tail(scratch)
        raise BoxRefused(
            f"{what}: the boxed child exited (code {code}) without a result"
            + (f": {printable(tail)}" if tail else "")
        )
    if path.stat().st_size > MAX_RESULT_BYTES:
        raise BoxRefused(f"{what}: the boxed child's result is over {MAX_RESULT_BYTES} bytes")
    from benchmark.core.bounded_json import loads

    try:
        # integers bounded while parsed: a 5,000-digit one is a refusal, not a ValueError traceback
        raw = loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError included
        raise BoxRefused(f"{what}: the boxed child's result is not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("ok") is not True:
        reason = raw.get("error") if isinstance(raw, dict) else None
        raise BoxRefused(
            f"{what}: " + (printable(str(reason))[:300] if reason else "the boxed child failed")
        )
    return raw


def _stderr_tail(scratch: Path) -> str:
    try:
        with open(scratch / "stderr.txt", "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 2000))
            lines = fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


__all__ = [
    "BWRAP",
    "DEFAULT_BOX_LIMITS",
    "BoxLimits",
    "BoxRefused",
    "box_unavailable",
    "hidden_paths",
    "run_boxed",
]
