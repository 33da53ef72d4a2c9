"""Where the maintainers get a submission's plugin.

A record of a plugin method names its distribution, version and source digest (``env.plugins``),
not where the code can be had: ``pip install 'fssl-x==0.1.0'`` works only if the author published
it on PyPI. A bundle can say where it comes from:

- ``submit --plugin-source dist/fssl_x-0.1.0-py3-none-any.whl`` copies the wheel into the bundle
  (``plugins/<wheel>``, sha256 in the manifest's ``files``); submit refuses a wheel whose sources are
  not the ones the records ran (their source digest, read from the wheel's members);
- ``submit --plugin-source 'fssl-x @ git+https://host/repo@<commit>'`` records a VCS URL pinned to a
  commit;
- a record whose plugin pip installed from a VCS URL carries that URL and commit already
  (``env.plugins``): submit records it without being asked.

The manifest lists them in ``plugin_sources`` and ``accept`` names them in its refusal: what to
install, from where. Torch-free.
"""

from __future__ import annotations

import re
import shlex
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.core.provenance import counted, digest_of_sources

WHEEL_DIR = "plugins"
VCS_SCHEMES = ("git+", "hg+", "svn+", "bzr+")
COMMIT_RE = re.compile(r"[0-9a-f]{7,40}")
USAGE = "--plugin-source takes a wheel file (.whl) or 'NAME @ git+URL@COMMIT'"


class PluginSourceError(ValueError):
    """A plugin source that cannot be bundled or read (one line)."""


@dataclass(frozen=True)
class PluginSource:
    """One distribution's source: a wheel inside the bundle, or a VCS URL pinned to a commit."""

    distribution: str
    version: str | None
    wheel: str | None = None  # path inside the bundle
    sha256: str | None = None  # of the wheel
    url: str | None = None  # a pip requirement URL: git+https://host/repo@<commit>

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def install(self, bundle: Path | str, *, force: bool = False) -> str:
        """The command that installs exactly this source (``force``: over an installed copy of the
        same version)."""
        pip = "pip install --force-reinstall --no-deps" if force else "pip install"
        if self.url is not None:
            return f"{pip} {quoted(f'{self.distribution} @ {self.url}')}"
        bundle = Path(bundle)
        if bundle.is_dir():
            return f"{pip} {quoted(str(bundle / str(self.wheel)))}"
        wheel = shlex.quote(str(self.wheel))  # the manifest's word: a name, never shell syntax
        return f"tar -xzf {quoted(str(bundle))} {wheel} && {pip} {wheel}"

    def describe(self) -> str:
        where = f"the bundle's wheel {self.wheel}" if self.wheel else self.url
        return f"{self.distribution} {self.version or ''} from {where}".replace("  ", " ")


def quoted(text: str) -> str:
    """``text`` as one single-quoted shell word, its own quotes escaped: the install lines accept
    prints carry names and URLs from a bundle, and a ``'`` in one must not end the word."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name (``fssl_x-0.1.0-py3-none-any.whl``)."""
    parts = path.name[: -len(".whl")].split("-")
    if not path.name.endswith(".whl") or len(parts) < 5:
        raise PluginSourceError(f"{path.name} is not a wheel file name (NAME-VERSION-...-TAG.whl)")
    return parts[0], parts[1]


def wheel_source_digest(path: Path, top: str) -> str:
    """The source digest (``benchmark.core.provenance``) of package ``top`` as the wheel holds it:
    the same digest an install of that wheel gives."""
    try:
        with zipfile.ZipFile(path) as wheel:
            items = [
                (name, wheel.read(name))
                for name in wheel.namelist()
                if name.startswith(f"{top}/") and counted(name) and not name.endswith("/")
            ]
    except (OSError, zipfile.BadZipFile) as exc:
        raise PluginSourceError(f"{path}: not a readable wheel ({exc})") from None
    return digest_of_sources(items)


def plugins_of(plugins: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, Mapping[str, Any]]:
    """{normalized distribution: provenance} of the records' ``env.plugins``."""
    out: dict[str, Mapping[str, Any]] = {}
    for env in plugins:
        for prov in env.values():
            if prov.get("distribution"):
                out.setdefault(normalize(str(prov["distribution"])), prov)
    return out


def _from_wheel(path: Path, provs: Mapping[str, Mapping[str, Any]]) -> PluginSource:
    if not path.is_file():
        raise PluginSourceError(f"--plugin-source {path}: no such file")
    dist, version = wheel_name(path)
    prov = provs.get(normalize(dist))
    if prov is None:
        raise PluginSourceError(
            f"--plugin-source {path.name}: no record ran {dist} "
            f"(the records' plugins: {', '.join(sorted(provs)) or 'none'})"
        )
    if prov.get("version") != version:
        raise PluginSourceError(
            f"--plugin-source {path.name}: version {version}, the records ran {prov.get('version')}"
        )
    digest = wheel_source_digest(path, str(prov["module"]).split(".")[0])
    if digest != prov.get("source_digest"):
        raise PluginSourceError(
            f"--plugin-source {path.name}: its sources (digest {digest[:12]}…) are not the ones the "
            f"records ran ({str(prov.get('source_digest'))[:12]}…); build the wheel from that code"
        )
    return PluginSource(str(prov["distribution"]), version, wheel=f"{WHEEL_DIR}/{path.name}")


def _from_url(text: str, provs: Mapping[str, Mapping[str, Any]]) -> PluginSource:
    name, _, url = (part.strip() for part in text.partition(" @ "))
    prov = provs.get(normalize(name))
    base, _, commit = url.rpartition("@")
    if not url.startswith(VCS_SCHEMES) or not COMMIT_RE.fullmatch(commit) or "://" not in base:
        raise PluginSourceError(
            f"--plugin-source {text!r}: a VCS URL pinned to a commit, e.g. "
            f"'{name} @ git+https://host/repo@<commit hash>'"
        )
    if prov is None:
        raise PluginSourceError(f"--plugin-source {text!r}: no record ran {name}")
    if prov.get("commit") and not str(prov["commit"]).startswith(commit):
        raise PluginSourceError(
            f"--plugin-source {text!r}: the records ran commit {prov['commit']}, not {commit}"
        )
    return PluginSource(str(prov["distribution"]), prov.get("version"), url=url)


def recorded_source(prov: Mapping[str, Any]) -> PluginSource | None:
    """The VCS URL and commit pip recorded when it installed the plugin the record ran, if any."""
    url, commit = prov.get("url"), prov.get("commit")
    if not (isinstance(url, str) and isinstance(commit, str) and prov.get("distribution")):
        return None
    url = url if url.startswith(VCS_SCHEMES) else f"git+{url}"
    return PluginSource(str(prov["distribution"]), prov.get("version"), url=f"{url}@{commit}")


def resolve_sources(
    plugins: Iterable[Mapping[str, Mapping[str, Any]]], given: Sequence[str]
) -> list[tuple[PluginSource, Path | None]]:
    """Each plugin source of a submission, checked against the records' ``env.plugins``, with the
    wheel file to copy into the bundle (None for a URL); plugins pip installed from a VCS URL are
    added as recorded."""
    provs = plugins_of(plugins)
    out: list[tuple[PluginSource, Path | None]] = []
    for text in given:
        if text.endswith(".whl"):
            out.append((_from_wheel(Path(text), provs), Path(text)))
        elif " @ " in text:
            out.append((_from_url(text, provs), None))
        else:
            raise PluginSourceError(f"{USAGE}, got {text!r}")
    named = {normalize(s.distribution) for s, _ in out}
    for key, prov in sorted(provs.items()):
        source = recorded_source(prov) if key not in named else None
        if source is not None:
            out.append((source, None))
    return out


def read_sources(manifest: Mapping[str, Any]) -> dict[str, PluginSource]:
    """{normalized distribution: source} of a received manifest's ``plugin_sources``;
    PluginSourceError when it has the wrong shape (a wheel must be one of the bundle's files)."""
    raw = manifest.get("plugin_sources", [])
    if not isinstance(raw, list):
        raise PluginSourceError("'plugin_sources' must be a list")
    out = {}
    fields = ("distribution", "version", "wheel", "sha256", "url")
    for i, entry in enumerate(raw):
        ok = isinstance(entry, dict) and set(entry) <= set(fields)
        ok = ok and all(isinstance(entry.get(k), (str, type(None))) for k in fields)
        ok = ok and bool(entry.get("distribution")) and (entry.get("wheel") or entry.get("url"))
        if ok and entry.get("wheel") and entry["wheel"] not in manifest.get("files", {}):
            ok = False
        if not ok:
            raise PluginSourceError(
                f"plugin_sources[{i}] must be an object with a distribution and a wheel listed in "
                "'files' or a url"
            )
        source = PluginSource(**{k: entry.get(k) for k in fields})
        out[normalize(source.distribution)] = source
    return out


__all__ = [
    "WHEEL_DIR",
    "PluginSource",
    "PluginSourceError",
    "read_sources",
    "resolve_sources",
    "wheel_source_digest",
]
