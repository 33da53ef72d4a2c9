"""Issue 54, items 4 and 5: the index says what the records are (read from them, not written by
hand), terms are explained where they appear, an empty row says "none", and every record is one
download linked from the index."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from benchmark.records.integrity import integrity_problems
from benchmark.records.schema import from_json
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import make_record, standard_records, write_records


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _site(tmp_path: Path, records) -> Path:
    write_records(tmp_path / "results", records)
    out = tmp_path / "site"
    build_site([tmp_path / "results"], out)
    return out


def test_the_index_says_what_the_records_are_from_the_records(tmp_path: Path) -> None:
    recs = standard_records()
    out = _site(tmp_path, recs)
    index = (out / "index.html").read_text()
    scope = _text(index.split('id="scope"', 1)[1].split("</p>", 1)[0])
    # the factory's cells: cifar10 on resnet18_cifar, 100 rounds x 5 local epochs, K = 100
    assert f"the {len(recs)} records the ranked tracks show" in scope
    assert "cifar10" in scope and "resnet18_cifar backbone" in scope
    assert "100 rounds × 5 local epochs" in scope and "K = 100 clients" in scope
    assert "seeds 0-2" in scope
    # what they are not: the result tracks without a record, by dataset
    assert re.search(
        r"not results at the papers' scale: \d+ result tracks have no record yet", scope
    )
    assert "(on cifar10, cifar100" in scope
    assert 'href="records.json"' in index.split('id="scope"', 1)[1].split("</p>", 1)[0]


def test_one_download_holds_every_record_and_each_still_verifies(tmp_path: Path) -> None:
    recs = standard_records()
    out = _site(tmp_path, recs)
    body = json.loads((out / "records.json").read_text())
    assert body["n_records"] == len(recs) == len(body["records"])
    assert {r["record"]["cell_id"] for r in body["records"]} == {r.cell_id for r in recs}
    for row in body["records"]:
        assert row["path"].startswith("results/") and not row["path"].startswith("/")
        rec = from_json(json.dumps(row["record"]))
        assert integrity_problems(rec) == [], row["path"]
    index = (out / "index.html").read_text()
    downloads = index.split('id="downloads"', 1)[1]
    assert '<a href="records.json">records.json</a>' in downloads


def test_terms_are_explained_where_they_appear(tmp_path: Path) -> None:
    recs = [
        make_record(m, alpha=0.1, seed=s, value=v + s)
        for m, v in (("fedavg_simclr", 60.0), ("orchestra", 70.0), ("no_pretrain", 50.0))
        for s in range(3)
    ]
    out = _site(tmp_path, recs)
    index = (out / "index.html").read_text()
    # the partition's short label in an answer carries what it means
    head = re.search(r'<h3><a href="tracks/[^"]+">kNN</a> · <abbr title="([^"]+)">', index)
    assert head and "Dirichlet label skew, α = 0.1" in html.unescape(head.group(1))
    # random init and calibrated random init carry their meaning; a glossary is linked
    assert re.search(r'<abbr title="random init: [^"]+">random init</abbr>', index)
    assert 'href="legend.html#terms"' in index
    legend = (out / "legend.html").read_text()
    assert (
        'id="terms"' in legend
        and 'id="term-dir"' in legend
        and 'id="term-no_pretrain_bn"' in (legend)
    )


def test_a_method_without_a_reference_page_says_none(tmp_path: Path) -> None:
    recs = [make_record("fedfoo", seed=s, value=60.0 + s) for s in range(3)]
    recs += [make_record("fedavg_simclr", seed=s, value=61.0 + s) for s in range(3)]
    out = _site(tmp_path, recs)
    page = (out / "methods" / "fedfoo.html").read_text()
    row = page.split("<th>reference page</th>", 1)[1].split("</tr>", 1)[0]
    assert _text(row).strip().startswith("none")
