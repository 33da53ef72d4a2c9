"""Claim files: at most one live runner works on a cell (or a shared pre-training folder) at a time.

A claim is a small JSON file created with ``O_CREAT | O_EXCL`` (atomic on local file systems and on
NFSv3+), holding who owns it (host, pid, a random token, an optional ``owner`` string such as a
SLURM job id) and refreshed by a heartbeat thread that bumps its mtime. Another runner treats a
claim as *stale*, and may break it, when

- its pid is dead on this same host (or it is our own pid but no live ``Claim`` object in this
  process holds it: a claim left behind by an earlier, crashed attempt inside the same worker), or
- its ``owner`` equals ours (a requeued SLURM job keeps its job id; the claim is from its previous
  life), or
- its heartbeat (mtime) is older than ``timeout_s`` (a runner on another host that died or lost the
  network).

Breaking a stale claim is serialised by a short ``flock`` on a sibling ``.lock`` file, so two
runners that both see the same stale claim cannot both take it over (on file systems without working
``flock`` the window shrinks to the time between re-reading and unlinking the claim). Records
themselves are written atomically by the runner, so a claim never guards a half-written file; it
only prevents two runners from doing the same work at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEARTBEAT_S = float(os.environ.get("FSSL_CLAIM_HEARTBEAT_S", "30"))
# a claim not refreshed for this long is stale
TIMEOUT_S = float(os.environ.get("FSSL_CLAIM_TIMEOUT_S", "300"))

_HELD: set[str] = set()  # tokens of the claims held by live Claim objects in this process
_HELD_LOCK = threading.Lock()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` names a running (non-zombie) process on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child that its parent has not reaped yet is a zombie: dead for our purposes
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (OSError, ValueError, IndexError):
        return True


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim's content plus ``age_s`` (seconds since the last heartbeat), or None if there is no
    claim."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        info = json.loads(text)
        if not isinstance(info, dict):
            info = {}
    # created, not yet written (or torn by a crash): judged by its heartbeat alone
    except ValueError:
        info = {}
    info["age_s"] = max(0.0, time.time() - st.st_mtime)
    return info


def stale_reason(
    info: dict[str, Any], *, timeout_s: float = TIMEOUT_S, owner: str | None = None
) -> str | None:
    """Why a claim may be broken, or None if its runner is (as far as we can tell) alive."""
    if owner and info.get("owner") == owner:
        return f"left by an earlier attempt of {owner}"
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
        pid = info["pid"]
        if pid == os.getpid():
            with _HELD_LOCK:
                if info.get("token") not in _HELD:
                    return "left by an earlier attempt in this process"
        elif not pid_alive(pid):
            return f"pid {pid} on this host is dead"
    if info["age_s"] > timeout_s:
        return f"no heartbeat for {info['age_s']:.0f}s (> {timeout_s:.0f}s)"
    return None


def describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "nobody"
    who = f"{info.get('host', '?')}:{info.get('pid', '?')}"
    if info.get("owner"):
        who += f" ({info['owner']})"
    return f"{who}, heartbeat {info.get('age_s', 0):.0f}s ago"


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@dataclass
class Claim:
    """A held claim; ``release()`` (or leaving the ``with`` block) removes it if it is still
    ours."""

    path: Path
    token: str
    heartbeat_s: float = HEARTBEAT_S
    # the claim this one broke, and why it was stale ("host:pid ...: pid N on this host is dead"),
    # or None: a runner that takes over a dead one's cell says so (issue 57)
    took_over: str | None = None
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    def start_heartbeat(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"claim-heartbeat {self.path}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        assert self._stop is not None
        while not self._stop.wait(self.heartbeat_s):
            if not self.still_ours():
                return
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def still_ours(self) -> bool:
        info = read_claim(self.path)
        return bool(info) and info.get("token") == self.token

    def release(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with _HELD_LOCK:
            _HELD.discard(self.token)
        with _flock(self.path.with_name(self.path.name + ".lock")):
            if self.still_ours():
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _create(path: Path, owner: str | None, purpose: str) -> str | None:
    token = secrets.token_hex(8)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    with _HELD_LOCK:
        _HELD.add(token)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "token": token,
                "owner": owner,
                "purpose": purpose,
                "started": time.time(),
            },
            fh,
        )
        fh.flush()
        os.fsync(fh.fileno())
    return token


def try_claim(
    path: Path,
    *,
    owner: str | None = None,
    timeout_s: float = TIMEOUT_S,
    heartbeat_s: float = HEARTBEAT_S,
    purpose: str = "",
) -> Claim | None:
    """Take the claim at ``path`` (breaking it if stale) and start its heartbeat; None if a live
    runner holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = _create(path, owner, purpose)
    took_over = None
    if token is None:
        with _flock(path.with_name(path.name + ".lock")):
            info = read_claim(path)
            if info is not None:
                why = stale_reason(info, timeout_s=timeout_s, owner=owner)
                if why is None:
                    return None
                took_over = f"{describe(info)}: {why}"
                path.unlink(missing_ok=True)
            token = _create(path, owner, purpose)
        if token is None:
            return None
    claim = Claim(path, token, heartbeat_s=heartbeat_s, took_over=took_over)
    claim.start_heartbeat()
    return claim


def wait_claim(
    path: Path,
    *,
    owner: str | None = None,
    timeout_s: float = TIMEOUT_S,
    heartbeat_s: float = HEARTBEAT_S,
    poll_s: float = 1.0,
    purpose: str = "",
) -> Claim:
    """Block until the claim at ``path`` is ours (the holder finishes, or its claim goes stale)."""
    while True:
        claim = try_claim(
            path, owner=owner, timeout_s=timeout_s, heartbeat_s=heartbeat_s, purpose=purpose
        )
        if claim is not None:
            return claim
        time.sleep(poll_s)


def clear_stale(path: Path, *, timeout_s: float = TIMEOUT_S) -> str | None:
    """Remove the claim at ``path`` if it is stale and return why; None (nothing removed) when there
    is none or a live runner holds it. For a claim nobody needs to take any more: a pre-training
    lock whose pre-training is finished, left by a runner killed between writing the final state and
    releasing it (a worker dies with its run since issue 57, so nobody else releases it)."""
    path = Path(path)
    if not path.exists():
        return None
    with _flock(path.with_name(path.name + ".lock")):
        info = read_claim(path)
        why = None if info is None else stale_reason(info, timeout_s=timeout_s)
        if why is not None:
            path.unlink(missing_ok=True)
    return why


def live_claim(path: Path, *, timeout_s: float = TIMEOUT_S) -> dict[str, Any] | None:
    """The claim at ``path`` if a live runner holds it (for ``status``), else None."""
    info = read_claim(Path(path))
    if info is None or stale_reason(info, timeout_s=timeout_s) is not None:
        return None
    return info
