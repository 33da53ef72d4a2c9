"""Where the maintainers get a submission's plugin (issue 40): a bundle names a wheel it carries or a
VCS URL pinned to a commit; submit checks a wheel's sources against the records' source digest;
accept's refusal says what to install, from where, and says when an installed copy of the same
version has other sources (digest against digest)."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from benchmark.core.provenance import source_digest
from benchmark.records.schema import ResultRecord
from benchmark.submission.accept_bundle import PluginSources, plugin_problems
from benchmark.submission.plugin_sources import (
    PluginSource,
    PluginSourceError,
    read_sources,
    resolve_sources,
    wheel_source_digest,
)

SOURCES = {"method.py": b"class FedX: ...\n", "__init__.py": b'"""fssl-x."""\n'}


def make_wheel(folder: Path, sources: dict[str, bytes], version: str = "0.1.0") -> Path:
    """A wheel as setuptools builds one: the package's files and its .dist-info, zipped."""
    path = folder / f"fssl_x-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in sources.items():
            wheel.writestr(f"fssl_x/{name}", data)
        wheel.writestr(f"fssl_x-{version}.dist-info/METADATA", "Name: fssl-x\n")
    return path


def installed_digest(folder: Path, sources: dict[str, bytes]) -> str:
    """The source digest of the same files installed (benchmark.core.provenance)."""
    files = []
    for name, data in sources.items():
        (folder / "fssl_x").mkdir(parents=True, exist_ok=True)
        (folder / "fssl_x" / name).write_bytes(data)
        files.append((f"fssl_x/{name}", folder / "fssl_x" / name))
    return source_digest(files)


def plugins(digest: str, **extra: str) -> dict[str, dict[str, str]]:
    prov = {"module": "fssl_x.method", "distribution": "fssl-x", "version": "0.1.0"}
    return {"method:fedx": {**prov, "source_digest": digest, **extra}}


def test_a_wheel_has_the_source_digest_of_its_installed_files(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, SOURCES)
    assert wheel_source_digest(wheel, "fssl_x") == installed_digest(tmp_path / "site", SOURCES)
    (tmp_path / "edited").mkdir()
    edited = make_wheel(tmp_path / "edited", {**SOURCES, "method.py": b"class FedX: pass\n"})
    assert wheel_source_digest(edited, "fssl_x") != wheel_source_digest(wheel, "fssl_x")


def test_submit_takes_a_wheel_of_the_code_the_records_ran_and_refuses_another(
    tmp_path: Path,
) -> None:
    digest = installed_digest(tmp_path / "site", SOURCES)
    wheel = make_wheel(tmp_path, SOURCES)
    ((source, path),) = resolve_sources([plugins(digest)], [str(wheel)])
    assert source.wheel == f"plugins/{wheel.name}" and path == wheel
    with pytest.raises(PluginSourceError, match=r"its sources \(digest .*\) are not the ones"):
        resolve_sources([plugins("ab" * 32)], [str(wheel)])
    with pytest.raises(PluginSourceError, match="version 0.1.0, the records ran 0.2.0"):
        resolve_sources(
            [{"method:fedx": {**plugins(digest)["method:fedx"], "version": "0.2.0"}}], [str(wheel)]
        )
    with pytest.raises(PluginSourceError, match="no record ran fssl_x"):
        resolve_sources([{}], [str(wheel)])


def test_a_vcs_source_must_pin_a_commit_and_a_recorded_one_is_kept(tmp_path: Path) -> None:
    url = "git+https://example.org/fssl-x@0123456789abcdef0123456789abcdef01234567"
    ((source, path),) = resolve_sources([plugins("ab" * 32)], [f"fssl-x @ {url}"])
    assert source.url == url and path is None
    for bad in ("fssl-x @ git+https://example.org/fssl-x", "fssl-x @ https://x.org/a@0123456"):
        with pytest.raises(PluginSourceError, match="pinned to a commit"):
            resolve_sources([plugins("ab" * 32)], [bad])
    with pytest.raises(PluginSourceError, match="takes a wheel file"):
        resolve_sources([plugins("ab" * 32)], ["fssl-x"])
    # pip installed it from a VCS URL: the record says so, and submit keeps it unasked
    recorded = plugins("ab" * 32, url="https://example.org/fssl-x", commit="0123456")
    ((source, _),) = resolve_sources([recorded], [])
    assert source.url == "git+https://example.org/fssl-x@0123456"


def test_a_manifest_s_plugin_sources_are_checked_for_shape() -> None:
    wheel = "plugins/fssl_x-0.1.0-py3-none-any.whl"
    ok = {
        "files": {wheel: "0" * 64},
        "plugin_sources": [{"distribution": "fssl-x", "wheel": wheel}],
    }
    assert read_sources(ok)["fssl-x"].wheel == wheel
    for bad in (
        {"files": {}, "plugin_sources": [{"distribution": "fssl-x", "wheel": wheel}]},  # not listed
        {"files": {}, "plugin_sources": [{"distribution": "fssl-x"}]},  # nowhere to get it
        {"files": {}, "plugin_sources": [{"distribution": "fssl-x", "url": 3}]},
        {"files": {}, "plugin_sources": {"fssl-x": "x"}},
    ):
        with pytest.raises(PluginSourceError):
            read_sources(bad)


def _claiming(record: ResultRecord, method: str, digest: str) -> ResultRecord:
    prov = {**plugins(digest)["method:fedx"]}
    return dataclasses.replace(
        record,
        method=method,
        env=dataclasses.replace(record.env, plugins={f"method:{method}": prov}),
    )


def test_accept_says_where_to_get_a_missing_plugin(honest: ResultRecord, tmp_path: Path) -> None:
    record = _claiming(honest, "fedx", "ab" * 32)
    (line,) = plugin_problems(record)
    assert "pip install 'fssl-x==0.1.0'" in line and "only if its author published" in line
    wheel = PluginSource("fssl-x", "0.1.0", wheel="plugins/fssl_x-0.1.0-py3-none-any.whl")
    tarball = PluginSources(tmp_path / "b.tar.gz", {"fssl-x": wheel})
    (line,) = plugin_problems(record, tarball)
    assert (
        f"tar -xzf '{tmp_path / 'b.tar.gz'}' plugins/fssl_x-0.1.0-py3-none-any.whl && "
        "pip install plugins/fssl_x-0.1.0-py3-none-any.whl" in line
    )
    folder = PluginSources(tmp_path, {"fssl-x": wheel})
    assert f"pip install '{tmp_path}/plugins/fssl_x" in plugin_problems(record, folder)[0]


def test_accept_says_an_installed_copy_of_the_same_version_has_other_sources(
    honest: ResultRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to say 'install fssl-x 0.1.0' to a maintainer who had fssl-x 0.1.0 installed."""
    from benchmark.core import provenance

    here = {**plugins("ef" * 32)["method:fedx"]}
    from benchmark.contracts.registries import METHODS

    method = METHODS.get("fedavg_simclr")  # installed "from fssl-x"; its tasks stay built in
    monkeypatch.setattr(provenance, "component_provenance", lambda o: here if o is method else None)
    record = _claiming(honest, "fedavg_simclr", "cd" * 32)
    url = "git+https://example.org/fssl-x@0123456"
    (line,) = plugin_problems(
        record, PluginSources(Path("b"), {"fssl-x": PluginSource("fssl-x", "0.1.0", url=url)})
    )
    assert "the installed copy of fssl-x 0.1.0 has other sources than the record ran" in line
    assert "efefefefefef… here, cdcdcdcdcdcd… in the record; same version" in line
    assert f"pip install --force-reinstall --no-deps 'fssl-x @ {url}'" in line


def test_a_bundle_carries_the_wheel_and_accept_takes_its_manifest(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit copies the wheel into plugins/ (listed in files with its sha256), the manifest names
    it in plugin_sources, and accept reads that manifest (the record's method is built in, so it
    installs nothing). A wheel no record ran is refused before anything is written."""
    import json

    from benchmark.submission import plugin_sources
    from benchmark.submission.checks import SubmitError
    from benchmark.submission.submit_records import submit
    from tests.hostile import TRACK

    wheel = make_wheel(tmp_path, SOURCES)
    with pytest.raises(SubmitError, match="no record ran fssl_x"):
        submit([run_root], track=TRACK, out=tmp_path / "b0", manifests=None, reevaluate=False,
               plugin_sources=[str(wheel)])  # fmt: skip
    assert not (tmp_path / "b0").exists()
    source = PluginSource("fssl-x", "0.1.0", wheel=f"plugins/{wheel.name}")
    monkeypatch.setattr(plugin_sources, "resolve_sources", lambda plugins, given: [(source, wheel)])
    report = submit([run_root], track=TRACK, out=tmp_path / "b", manifests=None, reevaluate=False)
    assert report.ok, report.format()
    assert (
        "plugin source for the maintainers: fssl-x 0.1.0 from the bundle's wheel" in report.format()
    )
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    (entry,) = manifest["plugin_sources"]
    assert (
        entry["wheel"] == f"plugins/{wheel.name}"
        and manifest["files"][entry["wheel"]] == entry["sha256"]
    )
    assert (tmp_path / "b" / entry["wheel"]).read_bytes() == wheel.read_bytes()
    from benchmark.submission.bundle import bundle_problems, read_manifest

    assert bundle_problems(tmp_path / "b", read_manifest(tmp_path / "b")) == []
    assert read_sources(manifest)["fssl-x"] == dataclasses.replace(source, sha256=entry["sha256"])


@pytest.mark.parametrize(
    "url",
    ["git+https://host/repo@abc1234", "git+https://h/r@abc'; touch /tmp/pwned; echo '"],
)
def test_an_install_line_keeps_a_hostile_url_or_wheel_name_one_shell_word(url: str) -> None:
    """accept prints these lines for the maintainer to run; a quote in a bundle's URL or wheel
    name must not end the word it sits in (review of issue 52)."""
    import shlex

    from benchmark.submission.plugin_sources import PluginSource

    words = shlex.split(PluginSource("fssl-x", "0.1.0", url=url).install("B"))
    assert words == ["pip", "install", f"fssl-x @ {url}"]
    wheel = "x';touch y;'.whl"
    line = PluginSource("fssl-x", "0.1.0", wheel=wheel).install("/no/such/bundle.tar.gz")
    assert shlex.split(line) == [
        "tar",
        "-xzf",
        "/no/such/bundle.tar.gz",
        wheel,
        "&&",
        "pip",
        "install",
        wheel,
    ]
