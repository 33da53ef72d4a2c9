"""Issue 61: a first `run` on a machine without the data. The project's own multi-line errors print
as lines (no literal \\n); a value from outside (a grid's name, a data root, a dataset name) is
still escaped wherever it is shown; `prefetch --grid NAME` lists, refuses early (offline, no hub
login), skips what is complete, resumes a broken download and ends with the `run` command; `run
--dry-run` shows what is missing as part of the plan (exit 3)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmark.cli import main
from benchmark.core.errors import MissingData, UsageError, lines_of
from benchmark.data.datasets import HubImageDataset
from benchmark.data.hub_datasets import Coco2017, download_resumable

HOSTILE = "evil\n\x1b[2Jname\u202e"  # a line break, a terminal escape, a right-to-left override


def grid_file(tmp_path: Path, name: str = "tiny", dataset: str = "cifar10") -> Path:
    grid = {
        "name": name,
        "base": {
            "dataset": dataset,
            "backbone": {"name": "resnet_micro", "width": 4},
            "partition": "iid",
            "fl": {"num_clients": 2, "rounds": 1},
            "tasks": ["knn"],
        },
        "method_common": {"batch_size": 16},
        "axes": {"method": ["no_pretrain"]},
    }
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def shown_escaped(text: str) -> None:
    """No raw control character or bidi override from outside reached the terminal."""
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "\\u202e" in text


def test_missing_data_prints_as_lines_naming_the_one_command_first(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSSL_DATA_ROOT", str(tmp_path / "data"))
    path = grid_file(tmp_path)
    assert main(["run", "--grid", str(path), "--root", str(tmp_path / "r"), "--no-wandb"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("error: 1 dataset(s) missing for grid 'tiny' (about 144 MB")
    assert lines[1] == f"    python -m benchmark prefetch --grid {path}"  # a grid file: its path
    assert lines[3].startswith("  - dataset 'cifar10' is not under")
    assert "\\n" not in "".join(lines) and len(lines) > 4
    assert not (tmp_path / "r").exists()


def test_a_grid_name_and_a_data_root_from_outside_are_escaped_in_the_multi_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / f"data{HOSTILE}"
    path = grid_file(tmp_path, name=HOSTILE)
    argv = ["run", "--grid", str(path), "--root", str(tmp_path / "r"), "--data-root", str(root)]
    assert main([*argv, "--no-wandb"]) == 2
    err = capsys.readouterr().err
    shown_escaped(err)
    # the outside line break is shown as \n, never as a line of its own
    assert not any(line.startswith(("name", "[2J", "\\x1b")) for line in err.splitlines())
    assert err.count("evil\\n") >= 2  # in the header and in the data root of the paragraph
    exc = MissingData(HOSTILE, [f"under {root}"], data_root=str(root))
    assert all("\n" not in line and "\x1b" not in line for line in lines_of(exc))


def test_a_one_line_error_carrying_a_name_from_outside_stays_one_escaped_line() -> None:
    exc = UsageError(f"unknown grid {HOSTILE}")  # a message that does not escape its name itself
    (line,) = lines_of(exc)
    shown_escaped(line)
    assert "evil\\nname" not in line and "evil\\n" in line


def test_the_prefetch_command_escapes_a_dataset_name(capsys: pytest.CaptureFixture) -> None:
    assert main(["prefetch", HOSTILE]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    shown_escaped(err)


def test_prefetch_grid_offline_lists_then_fails_at_once_downloading_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def never(*_a, **_k):
        raise AssertionError("nothing may be downloaded")

    monkeypatch.setattr(HubImageDataset, "prefetch", never)
    monkeypatch.setattr(Coco2017, "prefetch", never)
    start = time.monotonic()
    code = main(["prefetch", "--grid", "main", "--data-root", str(tmp_path)])
    assert time.monotonic() - start < 1.0
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1
    assert "HF_HUB_OFFLINE=1" in err and "nothing was downloaded" in err
    table = {line.split()[0]: line for line in out.splitlines()[1:5]}
    assert set(table) == {"cifar10", "cifar100", "coco2017", "imagenet100"}
    assert all("to fetch" in line for line in table.values())
    assert "login" in table["imagenet100"] and "login" not in table["cifar10"]
    assert "GB" in table["coco2017"] and "to download: about" in out
    assert "HF_TOKEN" in out and "huggingface.co/datasets/clane9/imagenet-100" in out
    assert not any(tmp_path.iterdir())


@pytest.fixture()
def online(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every source reachable and a fake hub download that writes what a saved set holds; returns
    the names fetched, in order."""
    fetched: list[str] = []

    def fake_prefetch(self, root):
        fetched.append(self.name)
        (self.folder(root)).mkdir(parents=True)
        (self.folder(root) / "dataset_dict.json").write_text("{}")
        return self.folder(root)

    monkeypatch.setattr("benchmark.commands.prefetch.source_unreachable", lambda *a, **k: None)
    monkeypatch.setattr(HubImageDataset, "prefetch", fake_prefetch)
    return fetched


def test_prefetch_grid_fetches_what_is_absent_skips_what_is_there_and_names_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, online: list[str]
) -> None:
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10" / "dataset_dict.json").write_text("{}")  # already complete
    path = grid_file(tmp_path)
    grid = yaml.safe_load(path.read_text())
    grid["axes"]["dataset"] = ["cifar10", "cifar100"]
    path.write_text(yaml.safe_dump(grid))
    assert main(["prefetch", "--grid", str(path), "--data-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert online == ["cifar100"]
    assert any(line.split()[:2] == ["cifar10", "present"] for line in out)
    assert out[-1].endswith(f"Next: python -m benchmark run --grid {path} --data-root {tmp_path}")
    assert main(["prefetch", "--grid", str(path), "--data-root", str(tmp_path)]) == 0
    assert online == ["cifar100"] and "nothing to fetch" in capsys.readouterr().out


def test_prefetch_grid_refuses_a_gated_set_without_a_login_before_downloading(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    online: list[str],
) -> None:
    monkeypatch.setattr("benchmark.commands.prefetch.hub_token_present", lambda: False)
    path = grid_file(tmp_path, dataset="imagenet100")
    assert main(["prefetch", "--grid", str(path), "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert online == [] and "gated" in err and "hf auth login" in err and "HF_TOKEN" in err
    monkeypatch.setattr("benchmark.commands.prefetch.hub_token_present", lambda: True)
    assert main(["prefetch", "--grid", str(path), "--data-root", str(tmp_path)]) == 0
    assert online == ["imagenet100"]


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``payload``, honouring ``Range: bytes=N-``; records every Range asked."""

    payload = bytes(range(256)) * 64
    ranges: list[str | None] = []

    def do_GET(self) -> None:
        asked = self.headers.get("Range")
        self.ranges.append(asked)
        start = int(asked.split("=")[1].rstrip("-")) if asked else 0
        body = self.payload[start:]
        self.send_response(206 if asked else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/f.zip"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_interrupted_download_resumes_where_it_stopped(tmp_path: Path, server: str) -> None:
    RangeHandler.ranges = []
    target = tmp_path / "f.zip"
    (tmp_path / "f.zip.part").write_bytes(RangeHandler.payload[:1000])  # an earlier, broken try
    download_resumable(server, target)
    assert RangeHandler.ranges == ["bytes=1000-"]
    assert target.read_bytes() == RangeHandler.payload and not (tmp_path / "f.zip.part").exists()


def test_the_readme_gives_the_two_commands_in_order_with_the_download_size() -> None:
    from benchmark.grids.expand import load_grid
    from benchmark.launchers.preflight import grid_data_needs

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    total = sum(n.download_bytes or 0 for n in grid_data_needs(load_grid("main"), "/nonexistent"))
    assert f"about {total / 1e9:.0f} GB to\ndownload" in text
    first = text.index("python -m benchmark prefetch --grid main\n")
    assert text.index("python -m benchmark run --grid main\n") > first
