"""Hostile round 4 (issue 52, items 2, 4 and 5): what got through on c2ccfe5, and now cannot. Each
case is built as the attacker built it, small and in memory where it can be; a refusal is one line
(exit 2) and nothing is written anywhere (the scratch folder, TMPDIR inside it, is the same before
and after)."""

from __future__ import annotations

import gzip
import re
import tarfile
import time
from pathlib import Path

import pytest

from tests.hostile import accept_argv, refused


# ---- item 4: one parser for the archive ------------------------------------------------------------
def _header(
    name: bytes, kind: bytes, size: int, *, prefix: bytes = b"", magic: bytes = b"ustar\x0000"
) -> bytes:
    """One raw 512-byte tar header, checksum computed: any name, type, size, prefix and magic."""
    block = bytearray(512)
    block[: len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = f"{size:011o}\0".encode()
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = magic
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


def _data(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def _gz(path: Path, *parts: bytes) -> Path:
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            f.write(part)
        f.write(bytes(1024))
    return path


def _long_name_bomb(size: int) -> bytes:
    """A GNU long-name header announcing ``size`` bytes (NUL-filled), with its data."""
    return _header(b"././@LongLink", b"L", size) + bytes(-(-size // 512) * 512)


@pytest.fixture
def no_tarfile(monkeypatch: pytest.MonkeyPatch) -> list:
    """tarfile must never read a bundle: every call of tarfile.open is recorded and fails."""
    opened: list = []

    def refuse(*args, **kwargs):
        opened.append(args)
        raise AssertionError("tarfile read the bundle")

    monkeypatch.setattr(tarfile, "open", refuse)
    return opened


def _refused_fast(scratch: Path, capsys, bundle: Path, *needles: str) -> str:
    started = time.monotonic()
    line = refused(scratch, capsys, accept_argv(scratch, bundle), *needles)
    assert time.monotonic() - started < 10
    assert len(line) < 600, "a refusal line carries the archive's name whole"
    return line


def test_a_gnu_long_name_ending_in_a_slash_before_an_aregtype_header_is_refused(
    scratch: Path, capsys, no_tarfile: list
) -> None:
    """The scan took the member for a folder (its long name ends in '/') and read no data after it;
    tarfile took it for a file (its own name does not) and skipped its data into a long name the
    scan never saw. Here a regular file's name may not end in '/', whichever field holds it."""
    hidden = _long_name_bomb(8 << 20)  # what tarfile would read whole
    cover = _header(b"pad", b"0", len(hidden))  # what the old scan read instead, and skipped
    bundle = _gz(
        scratch / "slash.tar.gz",
        _header(b"././@LongLink", b"L", 2) + _data(b"d/"),
        _header(b"x", b"\0", 512),
        cover,
        hidden,
    )
    _refused_fast(scratch, capsys, bundle, "'d/' is a regular file whose name ends in '/'")
    assert not no_tarfile


def test_a_ustar_prefix_that_makes_a_folder_name_is_refused(
    scratch: Path, capsys, no_tarfile: list
) -> None:
    """The same through the ustar prefix field: prefix 'd', name '' reads 'd/' to one reader."""
    hidden = _long_name_bomb(8 << 20)
    bundle = _gz(
        scratch / "prefix.tar.gz",
        _header(b"", b"\0", 512, prefix=b"d"),
        _header(b"pad", b"0", len(hidden)),
        hidden,
    )
    _refused_fast(scratch, capsys, bundle, "'d/' is a regular file whose name ends in '/'")
    assert not no_tarfile


def test_a_member_a_file_to_one_reader_and_a_folder_to_the_other_is_refused(
    scratch: Path, capsys, no_tarfile: list
) -> None:
    """The reverse: a long name without '/' over a header whose own name ends in '/' (tarfile: a
    folder, no data skipped, then four long names hidden in the 'file's' data)."""
    names = b"".join(_long_name_bomb(2 << 20) for _ in range(4))
    bundle = _gz(
        scratch / "reverse.tar.gz",
        _header(b"././@LongLink", b"L", 1) + _data(b"y"),
        _header(b"x/", b"\0", len(names)),
        names,
    )
    _refused_fast(scratch, capsys, bundle, "'y' is a regular file whose name ends in '/'")
    assert not no_tarfile


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        pytest.param(
            [_header(b"manifest.json", b"7", 1) + _data(b"x")], "a contiguous file", id="conttype"
        ),
        pytest.param(
            [_header(b"././@LongLink", b"K", 1) + _data(b"y"), _header(b"a", b"0", 0)],
            "a GNU long link",
            id="long-link",
        ),
        pytest.param(
            [_header(b"g", b"g", 12) + _data(b"12 path=ab\n"), _header(b"a", b"0", 0)],
            "a PAX global header",
            id="pax-global",
        ),
        pytest.param(
            [_header(b"p", b"x", 14) + _data(b"14 linkpath=a\n"), _header(b"a", b"0", 0)],
            "a PAX record sets 'linkpath'",
            id="pax-linkpath",
        ),
        pytest.param(
            [
                _header(b"p", b"x", 9) + _data(b"9 path=a\n"),
                _header(b"././@LongLink", b"L", 1) + _data(b"b"),
                _header(b"c", b"0", 0),
            ],
            "two extended names for one member",
            id="two-names",
        ),
        pytest.param(
            [
                _header(b"././@LongLink", b"L", 1) + _data(b"b"),
                _header(b"c", b"0", 0, prefix=b"d"),
            ],
            "both an extended name and a ustar prefix",
            id="name-and-prefix",
        ),
        pytest.param(
            [_header(b"d", b"5", 512) + _data(b"x")], "folder 'd' announces 512 bytes", id="fat-dir"
        ),
        pytest.param(
            [_header(b"a\xff", b"0", 0)], "a member name is not UTF-8: 'a\\xff'", id="latin-1"
        ),
        pytest.param(
            [_header(b"././@LongLink", b"L", 2000) + _data(b"n" * 2000), _header(b"a", b"0", 0)],
            "a GNU long name of 2,000 bytes (at most 1,024)",
            id="long-name",
        ),
        pytest.param(
            [_header(b"old", b"0", 0, magic=bytes(8))], "without the ustar magic", id="v7-header"
        ),
        pytest.param([_header(b"././@LongLink", b"L", 1) + _data(b"z")], "no member", id="dangle"),
    ],
)
def test_anything_outside_the_tar_subset_is_refused_before_a_byte_is_written(
    scratch: Path, capsys, no_tarfile: list, parts: list[bytes], needle: str
) -> None:
    manifest = _header(b"manifest.json", b"0", 2) + _data(b"{}")
    bundle = _gz(scratch / "b.tar.gz", manifest, *parts)
    _refused_fast(scratch, capsys, bundle, needle)


def test_a_base_256_size_is_refused_before_conversion(scratch: Path, capsys) -> None:
    block = bytearray(_header(b"a", b"0", 0))
    block[124:136] = b"\x80" + b"\xff" * 11
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    _refused_fast(scratch, capsys, _gz(scratch / "b.tar.gz", bytes(block)), "base-256")


def test_the_checked_walk_is_the_extracting_walk(scratch: Path) -> None:
    """A genuine archive reads the same through the walker as through tarfile: every file's bytes,
    nothing else written (tarfile is the oracle here, writing the archive)."""
    import io

    from benchmark.submission.bundle import extract

    src = scratch / "b.tar.gz"
    files = {"manifest.json": b"{}", "records/m/" + "c" * 150 + "/record.json": b"r" * 1500}
    with tarfile.open(src, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dest = scratch / "out"
    dest.mkdir()
    extract(src, dest)
    got = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == files


# ---- item 2: one checkpoint, three trainings, across bundles and across time ------------------------
@pytest.fixture(scope="module")
def honest_folder(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmark.submission.submit_records import submit
    from tests.hostile import TRACK

    out = tmp_path_factory.mktemp("bundles") / "honest"
    assert submit([run_root], track=TRACK, out=out, manifests=None, reevaluate=False).ok
    return out


def _reproduced_as_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-evaluation stubbed to reproduce every reported value (its own tests run it for real):
    what is tested here is what accept decides before and after it."""
    import benchmark.submission.accept_bundle as acc
    from benchmark.records.acceptance_files import compare_scores

    monkeypatch.setattr(
        acc,
        "reevaluate",
        lambda record, pre, **k: (
            compare_scores(record.scores, record.scores),
            record.backbone_fingerprint,
        ),
    )


def _lr_times_10(cell: dict) -> None:
    cell["method"]["params"]["lr"] *= 10


def _rounds_500(cell: dict) -> None:
    cell["fl"]["rounds"] = 500


@pytest.mark.parametrize("edit", [_lr_times_10, _rounds_500], ids=["lr-x10", "500-rounds"])
def test_one_checkpoint_accepted_for_one_training_is_refused_for_another_in_a_later_bundle(
    honest_folder: Path,
    honest,
    scratch: Path,
    capsys,
    monkeypatch: pytest.MonkeyPatch,
    edit,
) -> None:
    from benchmark.cli import main
    from benchmark.submission.checkpoint_ledger import LEDGER_SUBDIR
    from tests.benchmark.test_hostile_round3 import _with_records
    from tests.hostile import reseal

    _reproduced_as_reported(monkeypatch)
    results = scratch / "deep" / "er" / "results"
    assert main(accept_argv(scratch, honest_folder)) == 0
    ledger = sorted(p.name.split("-")[0] for p in (results / LEDGER_SUBDIR).iterdir())
    assert ledger == ["checkpoint", "state"]
    assert main(accept_argv(scratch, honest_folder)) == 0  # the same training again: fine
    other = reseal(honest, edit_cell=edit)
    assert other.pretrain_key != honest.pretrain_key
    bundle = _with_records(honest_folder, scratch / "b2", [other])
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "was accepted before for another training",
        honest.cell_id,
    )


def _traffic(up: list[int], down: list[int]):
    def edit(record):
        import dataclasses

        from benchmark.records.schema import CommStats

        comm = CommStats(
            bytes_up=sum(up),
            bytes_down=sum(down),
            per_round_up=tuple(up),
            per_round_down=tuple(down),
        )
        return dataclasses.replace(record, comm=comm)

    return edit


@pytest.mark.parametrize(
    ("up", "down", "needle"),
    [
        pytest.param([1], [177376], "is not the one its checkpoint holds", id="one-byte"),
        pytest.param([0], [0], "is not the one its checkpoint holds", id="zero"),
    ],
)
def test_forged_traffic_is_refused_before_anything_is_re_run(
    honest_folder: Path, honest, scratch: Path, capsys, monkeypatch, up, down, needle
) -> None:
    from benchmark.records.integrity import seal
    from tests.benchmark.test_hostile_records import forbid_rerunning
    from tests.benchmark.test_hostile_round3 import _with_records

    forbid_rerunning(monkeypatch)
    forged = seal(_traffic(up, down)(honest))
    bundle = _with_records(honest_folder, scratch / "b", [forged])
    refused(scratch, capsys, accept_argv(scratch, bundle), "traffic:", needle)


def test_traffic_forged_in_the_checkpoint_too_is_refused_by_the_declaration(
    honest, run_root: Path
) -> None:
    """Both forged (the record and the counter its checkpoint carries): the bytes the method
    declares it sends (``declared_traffic``), summed over the round's sampled clients of the
    partition rebuilt here, must be the record's exactly; a byte more is as wrong as 1 byte."""
    import dataclasses

    from benchmark.engine.pretrained import Pretrained
    from benchmark.submission.oracle import PartitionOracle
    from benchmark.submission.traffic import cell_method, traffic_verdict

    (ckpt,) = run_root.rglob("final.pt")
    pre = Pretrained.load(ckpt, untrusted=True)
    sizes = PartitionOracle().client_sizes(honest.cell)
    assert sizes is not None
    method = cell_method(honest, None)
    verdict = traffic_verdict(honest, pre, method, *sizes)
    assert verdict.problems == [] and verdict.acceptance() == {"derived": True}
    genuine = honest.comm.per_round_up[0]
    assert genuine == 177376  # 2 clients x 88,688 bytes (encoder.* + projector.*)
    for sent in (1, 0, 10 * genuine, genuine + 1, genuine - 4):
        forged = _traffic([sent], [sent])(honest)
        pre_forged = dataclasses.replace(pre, comm_up=(sent,), comm_down=(sent,))
        (line, *_) = traffic_verdict(forged, pre_forged, method, *sizes).problems
        assert f"round 1 upload is {sent:,} bytes" in line
        assert f"declares it sends there is {genuine:,} bytes" in line


# ---- item 5: every remaining input bounded, every failure one line -----------------------------------
HUGE = "1" * 5000  # Python refuses to convert an integer of more than 4,300 digits: a ValueError


def test_a_5000_digit_integer_in_a_manifest_is_refused_while_parsing(
    honest, scratch: Path, capsys
) -> None:
    from benchmark.records.schema import to_json
    from tests.hostile import bundle_dir

    rel = f"records/x/{honest.cell_id}/record.json"
    b = bundle_dir(scratch / "b", {rel: to_json(honest)})
    text = (b / "manifest.json").read_text()
    (b / "manifest.json").write_text(text[:-1] + f', "size": {HUGE}}}')
    refused(scratch, capsys, accept_argv(scratch, b), "an integer of 5,000 digits")


def test_a_5000_digit_integer_in_a_record_is_one_skip_line_in_collect(
    honest, scratch: Path, capsys
) -> None:
    from benchmark.cli import main
    from benchmark.records.schema import to_json

    source = scratch / "src" / "records" / "v1" / honest.method
    source.mkdir(parents=True)
    text = to_json(honest).replace('"client_steps": 88', f'"client_steps": {HUGE}', 1)
    assert HUGE in text
    (source / f"{honest.cell_id}.json").write_text(text)
    main(["collect", "--from", str(scratch / "src"), "--results", str(scratch / "results")])
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert "an integer of 5,000 digits" in line and "Traceback" not in out + err


class _Raises:
    def __init__(self, where: str, size: object = 2000) -> None:
        self.where, self.id, self.state, self.name, self.size = where, "run1", "finished", "", size
        self.downloaded = False

    def files(self):
        if self.where == "files":
            raise RuntimeError("HTTP 500 from the W&B API")
        return [self]

    def download(self, root: str, replace: bool = False) -> None:
        self.downloaded = True
        if self.where == "download":
            raise ConnectionError("connection reset")


@pytest.mark.parametrize(
    ("where", "size", "needle"),
    [
        ("files", 2000, "RuntimeError: HTTP 500"),
        ("download", 2000, "ConnectionError: connection reset"),
        ("none", 10 << 30, "announces 10737418240 bytes"),
        ("none", None, "announces None bytes"),
    ],
)
def test_a_failing_or_oversized_wandb_file_is_one_skip_line(
    scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch, where, size, needle
) -> None:
    import benchmark.submission.wandb_collect as wc
    from benchmark.cli import main
    from tests.hostile import _Api

    run = _Raises(where, size)
    run.name = "record.json"
    monkeypatch.setattr(wc, "_api", lambda: _Api([run]))
    main(["collect", "--from", "wandb:me/proj", "--results", str(scratch / "results")])
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert needle in line and "Traceback" not in out + err
    if where == "none":
        assert not run.downloaded, "a file was downloaded before its size was checked"


def _deep_tracks(scratch: Path) -> Path:
    path = scratch / "tracks.yaml"
    path.write_text("tracks: " + "[" * 50_000 + "]" * 50_000 + "\n")
    return path


def test_a_tracks_file_nested_50000_deep_is_refused_by_submit(
    scratch: Path, capsys, run_root: Path
) -> None:
    argv = ["submit", str(run_root), "--track", "x", "--tracks", str(_deep_tracks(scratch))]
    refused(scratch, capsys, [*argv, "--out", str(scratch / "b")], "nested more than 64 levels")


def test_a_tracks_file_nested_50000_deep_is_refused_by_leaderboard_build(
    scratch: Path, capsys
) -> None:
    from leaderboard.__main__ import main as lb_main

    tracks = _deep_tracks(scratch)
    (scratch / "results").mkdir()
    argv = ["build", "--results", str(scratch / "results"), "--tracks", str(tracks)]
    argv += ["--out", str(scratch / "site")]
    before = sorted(p.name for p in scratch.iterdir())
    assert lb_main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "nested more than 64 levels" in line
    assert sorted(p.name for p in scratch.iterdir()) == before


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2066", "\ufeff"])
def test_format_characters_in_a_name_are_escaped_on_every_page(char: str) -> None:
    from leaderboard.pages import environment

    template = environment().from_string("<td>{{ machine }}</td><td>{{ note|safe }}</td>")
    page = template.render(machine=f"Intel{char}gninnur", note=f"a{char}b")
    assert char not in page
    assert repr(char)[1:-1] in page and "Intel" in page


def test_a_grid_of_10_to_the_29_rounds_is_refused_in_one_line(scratch: Path, capsys) -> None:
    from benchmark.grids.expand import GRIDS_DIR

    text = (GRIDS_DIR / "smoke.yaml").read_text()
    assert "rounds: 1," in text
    for field, value in (("rounds", 10**29), ("num_clients", 10**9), ("local_epochs", 10**6)):
        grid = scratch / f"{field}.yaml"
        edited = re.sub(rf"{field}: \d+", f"{field}: {value}", text, count=1)
        assert str(value) in edited
        grid.write_text(edited)
        refused(
            scratch, capsys, ["plan", "--grid", str(grid)], f"fl.{field} must be a whole number"
        )
