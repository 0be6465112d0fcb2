"""A crawl of real pages through the whole build: splits, charsets, newest capture, revisits, damage, counts."""
from __future__ import annotations

import glob
import gzip
import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.records.normalize import normalize_text
from beam_pipeline.web.extract import html_to_text
from beam_pipeline.web.records import payload_digest
from conftest import IN_PROCESS, REPO, deterministic_key_coder, grouping_key_coders, layer_digests, stages_by_name
from web_fixtures import (cut_record_in_member, handbook_dir, http_response, pywb_dir,  # noqa: F401
                          reencode_page, warc_record, write_warc)

TOKENIZER = os.path.join(REPO, "sample", "tokenizer", "tokenizer.json")
SPLIT_BYTES = 1 << 16  # the smallest allowed: crawl-a.warc.gz is read in several splits
# url -> (handbook page, encoding of the body, how the encoding is declared)
PAGES = {
    "http://debian.example/en/apt-cache": ("en-US/sect.apt-cache.html", "utf-8", "http"),
    "http://debian.example/en/installation": ("en-US/sect.installation-steps.html", "utf-8", "meta"),
    "http://debian.example/fr/installation": ("fr-FR/sect.installation-steps.html", "cp1252", "none"),
    "http://debian.example/de/installation": ("de-DE/sect.installation-steps.html", "utf-8", "http"),
    "http://debian.example/ru/installation": ("ru-RU/sect.installation-steps.html", "koi8-r", "http"),
    "http://debian.example/ko/project": ("ko-KR/the-debian-project.html", "euc-kr", "http"),
    "http://debian.example/ko/apt-cache": ("ko-KR/sect.apt-cache.html", "euc-kr", "meta"),  # 41 Hangul: needs a label
    "http://debian.example/ja/installation": ("ja-JP/sect.installation-steps.html", "shift_jis", "meta"),
    "http://debian.example/zh/installation": ("zh-CN/sect.installation-steps.html", "gb18030", "meta"),
}
EARLY, LATE, LATER = "2026-01-05T10:00:00Z", "2026-02-05T10:00:00Z", "2026-03-05T10:00:00Z"


def page_body(handbook_dir, name: str, encoding: str, declared: str) -> bytes:
    html = (handbook_dir / name).read_text(encoding="utf-8")
    return html.encode() if encoding == "utf-8" and declared != "meta" else reencode_page(
        html, encoding, meta=declared == "meta")


def response(url: str, date: str, body: bytes, content_type: str = "text/html", **kw) -> bytes:
    return warc_record("response", url, date, http_response(body, content_type, **kw))


@pytest.fixture(scope="module")
def crawl(tmp_path_factory, handbook_dir, pywb_dir):
    base = tmp_path_factory.mktemp("crawl")
    (base / "web").mkdir()
    (base / "arc").mkdir()
    expected = {"documents": {}}
    records = [warc_record("warcinfo", None, EARLY, b"software: beam_pipeline tests\r\n")]
    for url, (name, encoding, declared) in PAGES.items():
        body = page_body(handbook_dir, name, encoding, declared)
        charset = f"; charset={encoding}" if declared == "http" else ""
        records.append(warc_record("request", url, EARLY, f"GET {url[len('http://debian.example'):]} HTTP/1.1\r\n"
                                                          "Host: debian.example\r\n\r\n".encode()))
        records.append(response(url, EARLY, body, content_type=f"text/html{charset}"))
    records.append(response("http://debian.example/logo.png", EARLY, b"\x89PNG\r\n\x1a\n" + b"\0" * 300,
                            content_type="image/png"))
    records.append(response("http://debian.example/missing", EARLY, b"<html><p>Not found</p></html>",
                            status="404 Not Found"))
    records.append(warc_record("metadata", "http://debian.example/en/apt-cache", EARLY, b"outlinks: none\r\n"))
    offsets_a = write_warc(base / "web" / "crawl-a.warc.gz", records)

    # A second crawl a month later: en/apt-cache changed (the new capture wins), ko/project was
    # re-fetched with other content and then revisited with the digest of the *first* capture (that
    # one wins back), and one member in the middle of the file is corrupt.
    first_ko = page_body(handbook_dir, *PAGES["http://debian.example/ko/project"][:1], "euc-kr", "http")
    changed = (handbook_dir / "en-US/sect.apt-get.html").read_bytes()
    other_ko = (handbook_dir / "ko-KR/sect.apt-get.html").read_bytes()
    later = [
        response("http://debian.example/en/apt-cache", LATE, changed),
        response("http://debian.example/ko/project", LATE, other_ko),
        response("http://debian.example/en/broken", LATE, b"<html><p>will be damaged</p></html>" * 50),
        warc_record("revisit", "http://debian.example/ko/project", LATER, http_response(b"")[:-0 or None],
                    extra={"WARC-Payload-Digest": payload_digest(http_response(first_ko, "text/html; charset=euc-kr")
                                                                 .split(b"\r\n\r\n", 1)[1]),
                           "WARC-Profile": "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest"}),
        response("http://debian.example/en/cut", LATE, (handbook_dir / "en-US/sect.apt-get.html").read_bytes()),
        warc_record("conversion", "http://debian.example/wet/page", LATE,
                    "Plain text of a WET record.\nSecond line, ünïcode.".encode()),
    ]
    offsets_b = write_warc(base / "web" / "crawl-b.warc.gz", later)
    data = bytearray((base / "web" / "crawl-b.warc.gz").read_bytes())
    damaged = offsets_b[2]
    data[damaged + 30:damaged + 40] = b"\xff" * 10
    # the record before the WET one was cut short by its writer, which then closed its gzip member
    cut = offsets_b[4]
    cut_data, _ = cut_record_in_member(bytes(data), cut, offsets_b[5] - cut, len(later[4]) * 6 // 10)
    offsets_b[5] += len(cut_data) - len(data)
    (base / "web" / "crawl-b.warc.gz").write_bytes(cut_data)
    for name in ("example.arc.gz", "bad.arc"):
        shutil.copy(pywb_dir / name, base / "arc" / name)

    (base / "corpus.yaml").write_text(
        "name: web-test\noutput_root: out\nsources:\n"
        "  - {name: crawl, uri: 'web/*.warc.gz', format: warc, rank: 5, license: test, domain: web,\n"
        f"     extract: {{split_bytes: {SPLIT_BYTES}}}}}\n"
        "  - {name: arcs, uri: 'arc/*', format: warc, rank: 6, license: test, domain: web}\n"
        "ingest: {max_record_bytes: 1048576}\n"
        "accounting: {max_dead_letter_fraction: 1.0}\n"
        f"tokenize: {{tokenizer: {TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    expected.update(offsets_a=offsets_a, offsets_b=offsets_b, damaged=damaged, cut=cut)
    return base, expected


def build(base, output_root: str, split_bytes: int | None = None):
    config = base / "corpus.yaml"
    if split_bytes is not None:
        config = base / f"corpus-{split_bytes}.yaml"
        config.write_text((base / "corpus.yaml").read_text().replace(f"split_bytes: {SPLIT_BYTES}",
                                                                     f"split_bytes: {split_bytes}"))
    assert cli.main(["run", "--config", str(config), "--output_root", output_root, *IN_PROCESS]) == 0
    (metrics,) = glob.glob(os.path.join(output_root, "runs", "*", "metrics.json"))
    return stages_by_name(json.load(open(metrics)))


@pytest.fixture(scope="module")
def built(crawl):
    base, _ = crawl
    root = str(base / "out")
    stages = build(base, root)
    documents = [row for path in sorted(glob.glob(os.path.join(root, "layers", "ingest", "*", "documents",
                                                                "*.parquet")))
                 for row in pq.read_table(path).to_pylist()]
    dead = [row for path in sorted(glob.glob(os.path.join(root, "dead_letter", "ingest", "*", "*.parquet")))
            for row in pq.read_table(path).to_pylist()]
    return root, stages, {d["url"]: d for d in documents}, dead


def test_counts_balance_per_source(built):
    _, stages, _, _ = built
    crawl = stages["ingest"]["counts"]["by_source"]["crawl"]
    # crawl-a: warcinfo + 9 x (request, response) + png + 404 + metadata = 22
    # crawl-b: 6 records, one of them in the corrupt member, one cut short
    assert crawl["in"] == 28
    assert crawl["dead_letter"] == 2
    assert crawl["filtered"] == {"record_type": 11, "content_type": 1, "http_status": 1, "revisit": 1,
                                 "older_capture": 2}
    assert crawl["passed"] == 10  # 9 pages (2 replaced by another capture of their URL, + 1 new) + WET
    arcs = stages["ingest"]["counts"]["by_source"]["arcs"]
    assert arcs == {"in": 6, "passed": 1, "filtered": {"record_type": 1, "empty_text": 1}, "dead_letter": 3}


def test_provenance_of_every_document(built, crawl):
    _, _, documents, _ = built
    _, expected = crawl
    a = expected["offsets_a"]
    page = documents["http://debian.example/fr/installation"]
    assert page["file"].endswith("web/crawl-a.warc.gz")
    assert page["byte_offset"] == page["position"] == a[6]  # warcinfo, then (request, response) pairs
    assert page["date"] == EARLY and page["record_id"].startswith("<urn:uuid:")
    assert page["source"] == "crawl" and page["license"] == "test"
    wet = documents["http://debian.example/wet/page"]
    assert wet["text"] == "Plain text of a WET record.\nSecond line, ünïcode."
    assert wet["byte_offset"] == expected["offsets_b"][5]  # read intact right after the record cut short
    arc = documents["http://example.com/"]
    assert (arc["byte_offset"], arc["date"], arc["record_id"]) == (171, "2014-02-16T05:02:21Z", None)


def test_non_utf8_pages_come_out_as_their_text(built, handbook_dir):
    _, _, documents, _ = built
    for url, (name, encoding, declared) in PAGES.items():
        if url in ("http://debian.example/en/apt-cache", "http://debian.example/ko/project"):
            continue  # replaced by the second crawl (below)
        expected = normalize_text(html_to_text((handbook_dir / name).read_text(encoding="utf-8")).text)
        assert documents[url]["text"] == expected, (url, encoding, declared)


def test_newest_capture_and_revisit(built, handbook_dir):
    _, _, documents, _ = built
    changed = documents["http://debian.example/en/apt-cache"]
    assert changed["date"] == LATE and changed["file"].endswith("crawl-b.warc.gz")
    assert changed["text"].startswith("6.2.\u00a0aptitude, apt-get, and apt Commands\n\n")
    # the revisit (newest) repeats the first capture's payload: the first capture wins
    revisited = documents["http://debian.example/ko/project"]
    assert revisited["date"] == EARLY and revisited["file"].endswith("crawl-a.warc.gz")
    assert revisited["text"] == normalize_text(
        html_to_text((handbook_dir / "ko-KR/the-debian-project.html").read_text()).text)


def test_damage_is_dead_lettered_with_file_and_offset(built, crawl):
    _, _, documents, dead = built
    _, expected = crawl
    crawl_dead, cut = sorted((row for row in dead if row["source"] == "crawl"), key=lambda row: row["byte_offset"])
    assert crawl_dead["file"].endswith("web/crawl-b.warc.gz")
    assert crawl_dead["byte_offset"] == crawl_dead["position"] == expected["damaged"]
    assert crawl_dead["error"].startswith("corrupt gzip member")
    assert "http://debian.example/en/broken" not in documents
    assert cut["file"].endswith("web/crawl-b.warc.gz")
    assert cut["byte_offset"] == cut["position"] == expected["cut"]
    assert cut["error"].startswith("truncated record:") and "its gzip member ends first" in cut["error"]
    assert "http://debian.example/en/cut" not in documents
    assert not any("WARC-Type" in doc["text"] or "WARC/1.1" in doc["text"] for doc in documents.values())
    assert sorted(row["byte_offset"] for row in dead if row["source"] == "arcs") == [0, 134, 262]


def test_output_does_not_depend_on_the_split_size(built, crawl, tmp_path):
    root, _, _, _ = built
    base, _ = crawl
    build(base, str(tmp_path / "out"), split_bytes=1 << 30)
    ours = {k: v for k, v in layer_digests(root).items() if k.startswith("ingest/")}
    assert ours and ours == {k: v for k, v in layer_digests(str(tmp_path / "out")).items()
                             if k.startswith("ingest/")}
    with gzip.open(base / "web" / "crawl-a.warc.gz") as f:
        assert f.read(8) == b"WARC/1.1"


def test_output_does_not_depend_on_the_slices(built, crawl, tmp_path):
    """Ingest groups by slice of a partition (transforms/ingest.py): older captures and repeats are left out
    per slice, the layer is the same bytes for 1 slice per partition (the default here) and for several."""
    from beam_pipeline.sources.snapshot import estimated_text_bytes
    from beam_pipeline.transforms.ingest import slices_per_partition

    root, stages, _, _ = built
    base, _ = crawl
    config = base / "corpus-slices.yaml"
    config.write_text((base / "corpus.yaml").read_text().replace(
        "ingest: {max_record_bytes: 1048576}", "ingest: {max_record_bytes: 1048576, slice_bytes: 65536}"))
    out = str(tmp_path / "out")
    assert cli.main(["run", "--config", str(config), "--output_root", out, *IN_PROCESS]) == 0
    (snapshot,) = glob.glob(os.path.join(out, "snapshots", "*.json"))
    (ledger,) = glob.glob(os.path.join(out, "layers", "ingest", "*", "_LEDGER.json"))
    partitions = len(json.load(open(ledger))["outputs"]["documents"]["parts"])
    estimated = estimated_text_bytes(json.load(open(snapshot)))
    assert slices_per_partition(estimated, partitions, 1 << 20) == 1 < slices_per_partition(estimated, partitions, 65536)
    ours = {k: v for k, v in layer_digests(root).items() if k.startswith("ingest/")}
    assert ours and ours == {k: v for k, v in layer_digests(out).items() if k.startswith("ingest/")}
    (metrics,) = glob.glob(os.path.join(out, "runs", "*", "metrics.json"))
    assert stages_by_name(json.load(open(metrics)))["ingest"]["counts"] == stages["ingest"]["counts"]


def test_web_and_plain_files_in_one_build_group_by_deterministic_keys(crawl, tmp_path):
    """Web archives and plain files in one build: the newest capture per URL is a CoGroupByKey on the
    URL key, the documents of both branches meet in their partition's group, and every key coder is
    deterministic; the build gives the web documents of the crawl-only build plus the plain file."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.corpus_build import CorpusBuild
    from beam_pipeline.config.corpus import load_config

    seen = {}
    base, _ = crawl
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("A plain text file read next to the crawl.\n" * 20)
    mixed = base / "corpus-mixed.yaml"
    mixed.write_text((base / "corpus.yaml").read_text().replace("sources:\n", (
        "sources:\n  - {name: notes, uri: '%s/*.txt', format: text, rank: 4, license: test, domain: notes}\n"
        % (tmp_path / "notes")), 1))
    config = load_config(str(mixed)).model_copy(update={"output_root": str(tmp_path / "out")})
    result = CorpusBuild(config, PipelineOptions(IN_PROCESS), log=lambda m: None,
                         before_run=lambda pipeline: seen.update(grouping_key_coders(pipeline))).run()
    assert any("NewestCapturePerUrl/GroupByUrl" in name for name in seen)
    assert any("CollapseRepeatedRecords/GroupByPartition" in name for name in seen)
    assert all(deterministic_key_coder(name, coder) for name, coder in seen.items()), seen
    ingest = next(s for s in result.stages if s.stage == "ingest").counts["by_source"]
    assert ingest["notes"]["passed"] == 1 and sum(c["passed"] for c in ingest.values()) > 1


def test_trace_rereads_web_records_with_the_source_extraction_settings(crawl, tmp_path):
    """`trace` re-reads a record from its WARC; it must extract it as the build did
    (here the whole page, not the main content), or the text no longer matches the doc_id."""
    from beam_pipeline.dataset.lineage import read_lineage, reread_record

    base, _ = crawl
    config = base / "corpus-whole-page.yaml"
    config.write_text((base / "corpus.yaml").read_text().replace(
        f"extract: {{split_bytes: {SPLIT_BYTES}}}", f"extract: {{split_bytes: {SPLIT_BYTES}, main_content: false}}"))
    root = str(tmp_path / "out")
    assert cli.main(["run", "--config", str(config), "--output_root", root, *IN_PROCESS]) == 0
    (dataset,) = glob.glob(os.path.join(root, "datasets", "*"))
    manifest = json.load(open(os.path.join(dataset, "manifest.json")))
    rows = [r for r in read_lineage(dataset).to_pylist() if r["source"] == "crawl" and r["doc_id"]]
    assert len(rows) >= 5
    rereads = [reread_record(manifest, row) for row in rows]
    assert all(raw is not None for raw, _ in rereads)
    assert [matches for _, matches in rereads] == [True] * len(rows)


def test_report_counts_dead_letters_as_drops_of_their_source(built):
    """The run report of the crawl: dead letters are drops, and read - dropped = the dataset's documents."""
    from collections import Counter

    from beam_pipeline.report import locate
    from beam_pipeline.report.gather import gather

    root, stages, documents, dead = built
    data = gather(locate(root), detail=False)
    by_source = Counter(row["source"] for row in dead)  # the dead-letter Parquet rows
    assert by_source == {"crawl": 2, "arcs": 3}
    for source, n in by_source.items():
        assert data["drops_by_source"][source]["ingest:dead_letter"] == n
    assert data["warnings"] == []
    assert data["run"]["records_in"] - data["run"]["records_dropped"] == data["run"]["documents"] == len(documents)
