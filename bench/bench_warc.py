#!/usr/bin/env python3
"""Web archives in: records/s and MB/s per core, the pipeline's reader path next to bare FastWARC + Resiliparse.

1. **The WARC** (``bench/work/warc/crawl.warc.gz``, cached with a recipe
   digest): every HTML page of the pinned Debian documentation packages of
   ``bench/build_corpus.py`` (real multilingual HTML, ~7,100 pages, 227 MB),
   written as WARC/1.1 ``response`` records (each with its ``request``
   record, as crawlers write them), one gzip member per record (level 6), in
   capture *rounds* with a later date each until the file holds at least
   ``--min-mb`` MB (default 100): a re-crawl. Records are ordered by
   sha256(round, url).
2. **Passes**, each in its own child process pinned to one CPU (so the numbers
   are per core), over the same file:

   * ``bare read``: FastWARC ``ArchiveIterator`` (response records, HTTP
     parsed), every payload read;
   * ``pipeline read``: ``beam_pipeline.web.warc.iter_captures`` (own gzip
     member framing and damage checks, FastWARC parsing), every HTML payload read;
   * ``bare read+extract``: the bare read, then Resiliparse's
     ``detect_encoding`` + ``bytes_to_str`` and ``extract_plain_text``
     (main content, formatting kept) per page;
   * ``pipeline read+extract``: ``beam_pipeline.web.records.iter_web_records``
     (policy, body decoding, charset order, extraction with the title) and
     ``transforms.ingest.make_document`` (normalization, doc_id, content hash),
     i.e. everything ``ReadSplits`` does per record except Beam itself;
   * ``pipeline read+extract, 2 workers``: the same over the file's 32 MB
     splits (``plan_splits``) on 2 processes (wall clock; shows splitting works).

   MB = 10^6 bytes of the stored (compressed) WARC; HTML MB = payload bytes of
   the response records. CPU seconds are the child's user+system time.
3. **Results** go to ``bench/results/warc-<YYYYMMDD>.md`` (and ``.json``).

Usage:  .venv/bin/python bench/bench_warc.py [--min-mb 100] [--date 20261202]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import platform
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

WORK = REPO / "bench" / "work" / "warc"
RESULTS = REPO / "bench" / "results"
RECIPE_VERSION = 1
FIRST_DATE = (2026, 1, 5)


def log(message: str) -> None:
    print(f"[bench_warc] {message}", flush=True)


# --------------------------------------------------------------------------
# The WARC


def html_pages() -> list[tuple[str, Path]]:
    import build_corpus  # bench/build_corpus.py: pinned Debian packages, download + unpack

    pins = [pin for pin in build_corpus.PINS if pin.suffix == ".html"]
    build_corpus.fetch(pins)
    pages = []
    for pin in pins:
        root = build_corpus.unpack(pin)
        for path in sorted(root.rglob("*.html")):
            if path.is_file() and not path.is_symlink():
                pages.append((f"https://docs.example.org/{pin.package}/{path.relative_to(root).as_posix()}", path))
    return pages


def build_warc(min_mb: int, limit: int | None = None, *, work: Path = WORK,
               rounds: int | None = None) -> tuple[Path, dict]:
    """``work``/crawl.warc.gz: capture rounds of the pages until it holds ``min_mb`` MB, or exactly
    ``rounds`` rounds if given; cached with a digest of the recipe."""
    from fastwarc.warc import WarcRecord, WarcRecordType

    pages = html_pages()[:limit]
    recipe = {"v": RECIPE_VERSION, "min_mb": min_mb, "pages": [url for url, _ in pages]}
    if rounds is not None:
        recipe = {**recipe, "min_mb": None, "rounds": rounds}
    digest = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:16]
    target, info_path = work / "crawl.warc.gz", work / "crawl.json"
    if target.exists() and info_path.exists() and json.loads(info_path.read_text()).get("recipe") == digest:
        log(f"cached {target} ({target.stat().st_size / 1e6:.1f} MB)")
        return target, json.loads(info_path.read_text())
    work.mkdir(parents=True, exist_ok=True)
    bodies = {url: path.read_bytes() for url, path in pages}
    log(f"{len(pages)} pages, {sum(map(len, bodies.values())) / 1e6:.1f} MB of HTML; writing rounds")

    def record(kind, url, date, block, content_type):
        rec = WarcRecord()
        urn = hashlib.sha1(f"{kind}|{url}|{date}".encode()).hexdigest()
        rec.init_headers(kind, record_urn=f"uuid:{urn[:8]}-{urn[8:12]}-{urn[12:16]}-{urn[16:20]}-{urn[20:32]}".encode())
        rec.headers["WARC-Date"] = date
        rec.headers["WARC-Target-URI"] = url
        rec.headers["Content-Type"] = content_type
        rec.set_bytes_content(block)
        out = io.BytesIO()
        rec.write(out, checksum_data=kind == WarcRecordType.response)
        return gzip.compress(out.getvalue(), compresslevel=6, mtime=0)

    size = responses = html_bytes = written = 0
    with open(work / "crawl.warc.gz.tmp", "wb") as out:
        while (written < rounds) if rounds is not None else (size < min_mb * 1_000_000):
            date = f"{FIRST_DATE[0]}-{FIRST_DATE[1] + written:02d}-{FIRST_DATE[2]:02d}T12:00:00Z"
            order = sorted(bodies, key=lambda url: hashlib.sha256(f"{written}|{url}".encode()).digest())
            for url in order:
                body = bodies[url]
                path = url.split("/", 3)[3]
                request = f"GET /{path} HTTP/1.1\r\nHost: docs.example.org\r\n\r\n".encode()
                response = (f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
                            .encode() + body)
                for data in (record(WarcRecordType.request, url, date, request, "application/http; msgtype=request"),
                             record(WarcRecordType.response, url, date, response,
                                    "application/http; msgtype=response")):
                    out.write(data)
                    size += len(data)
                responses += 1
                html_bytes += len(body)
            written += 1
            log(f"round {written}: {size / 1e6:.1f} MB")
    os.replace(work / "crawl.warc.gz.tmp", target)
    info = {"recipe": digest, "bytes": size, "rounds": written, "pages": len(pages), "responses": responses,
            "records": 2 * responses, "html_bytes": html_bytes}
    info_path.write_text(json.dumps(info, indent=1))
    return target, info


# --------------------------------------------------------------------------
# Passes (each runs in a child pinned to one CPU)


def bare_read(path: str, extract: bool) -> dict:
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    records = chars = 0
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, record_types=WarcRecordType.response, parse_http=True):
            body = record.reader.read()
            records += 1
            if extract:
                text = extract_plain_text(bytes_to_str(body, detect_encoding(body)), main_content=True,
                                          preserve_formatting=True, list_bullets=True, alt_texts=False)
                chars += len(text)
    return {"records": records, "chars": chars}


def pipeline_read(path: str, start: int = 0, end: int | None = None) -> dict:
    from beam_pipeline.web.warc import iter_captures

    records = bad = 0
    select = lambda c: None if c.kind == "response" else "record_type"  # noqa: E731
    for item in iter_captures(lambda: open(path, "rb"), start=start, end=end, select=select):
        if getattr(item, "payload", None) is not None:
            records += 1
        elif not hasattr(item, "skip"):
            bad += 1
    return {"records": records, "chars": 0, "bad": bad}


def pipeline_extract(path: str, start: int = 0, end: int | None = None) -> dict:
    from beam_pipeline.config.corpus import SourceConfig
    from beam_pipeline.sources.readers import BadRecord
    from beam_pipeline.transforms.ingest import make_document
    from beam_pipeline.web.records import Filtered, Revisit, iter_web_records

    source = SourceConfig(name="crawl", uri=path, format="warc", rank=1, license="bench", domain="web")
    records = chars = bad = 0
    for item in iter_web_records(lambda: open(path, "rb"), source.extract, max_record_bytes=8 << 20,
                                 start=start, end=end):
        if isinstance(item, BadRecord):
            bad += 1
        elif not isinstance(item, (Filtered, Revisit)):
            document = make_document(item.record, source, path)
            records += 1
            chars += document["n_chars"] if document else 0
    return {"records": records, "chars": chars, "bad": bad}


def breakdown(path: str, limit: int = 2000) -> dict:
    """CPU seconds per step of the pipeline path, over the first ``limit`` HTML responses."""
    from beam_pipeline.config.corpus import SourceConfig
    from beam_pipeline.records.hashing import content_hash, doc_id
    from beam_pipeline.records.normalize import normalize_text
    from beam_pipeline.web.charset import decode_page
    from beam_pipeline.web.extract import html_to_text
    from beam_pipeline.web.records import decode_body, skip_reason
    from beam_pipeline.web.warc import Capture, iter_captures

    config = SourceConfig(name="crawl", uri=path, format="warc", rank=1, license="bench", domain="web").extract
    steps = dict.fromkeys(("read (framing + FastWARC)", "body decoding", "charset", "HTML to text",
                           "normalize (nfc-v1)", "doc_id + content_hash"), 0.0)
    names = list(steps)
    clock = time.process_time
    items = iter_captures(lambda: open(path, "rb"), select=lambda c: skip_reason(c, config, 8 << 20))
    done = 0
    while done < limit:
        start = clock()
        item = next(items, None)
        steps[names[0]] += clock() - start
        if item is None:
            break
        if not isinstance(item, Capture) or item.payload is None:
            continue
        t0 = clock()
        body = decode_body(item.payload, item.transfer_encoding, item.content_encoding, 8 << 20)
        t1 = clock()
        decoded = decode_page(body, item.charset)
        t2 = clock()
        text = html_to_text(decoded.text, extractor=config.extractor, main_content=config.main_content).text
        t3 = clock()
        text = normalize_text(text)
        t4 = clock()
        doc_id("crawl", text), content_hash(text)
        t5 = clock()
        for name, spent in zip(names[1:], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            steps[name] += spent
        done += 1
    return {"records": done, "steps": steps, "cpu_s": sum(steps.values()), "wall_s": 0.0, "chars": 0}


def _child(name: str, path: str, queue) -> None:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import beam_pipeline.transforms.ingest  # noqa: F401  imports are not part of any pass
    import beam_pipeline.web.records  # noqa: F401
    started, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if name == "bare read":
        result = bare_read(path, extract=False)
    elif name == "bare read+extract":
        result = bare_read(path, extract=True)
    elif name == "pipeline read":
        result = pipeline_read(path)
    elif name == "breakdown":
        result = breakdown(path)
    else:
        result = pipeline_extract(path)
    ended = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (ended.ru_utime - started.ru_utime) + (ended.ru_stime - started.ru_stime)
    result["wall_s"] = time.perf_counter() - wall
    queue.put(result)


def run_pass(name: str, path: str) -> dict:
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_child, args=(name, path, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def _split_worker(args) -> dict:
    path, start, end = args
    return pipeline_extract(path, start, end)


def run_split_pass(path: str, size: int, workers: int = 2) -> dict:
    from beam_pipeline.web.archive_streams import plan_splits

    splits = plan_splits(size, 32 << 20, gz=True, arc=False)
    wall = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_split_worker, [(path, start, end) for start, end in splits], chunksize=1)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"records": sum(p["records"] for p in parts), "chars": sum(p["chars"] for p in parts),
            "bad": sum(p["bad"] for p in parts), "wall_s": time.perf_counter() - wall, "splits": len(splits),
            "workers": workers, "children_cpu_s": children.ru_utime + children.ru_stime}


# --------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-mb", type=int, default=100, help="smallest WARC size in MB (10^6 bytes)")
    parser.add_argument("--date", default=time.strftime("%Y%m%d"), help="results file date (YYYYMMDD)")
    parser.add_argument("--pages", type=int, default=None, help="only the first N pages (a quick smoke run)")
    args = parser.parse_args()
    path, info = build_warc(args.min_mb, args.pages)
    load_start = os.getloadavg()
    passes = {}
    for name in ("bare read", "pipeline read", "bare read+extract", "pipeline read+extract"):
        log(f"pass: {name}")
        passes[name] = run_pass(name, str(path))
        log(f"  {passes[name]}")
    log("pass: breakdown of the pipeline path")
    steps = run_pass("breakdown", str(path))
    log(f"  {steps}")
    log("pass: pipeline read+extract over splits, 2 workers")
    split = run_split_pass(str(path), info["bytes"])
    log(f"  {split}")
    load_end = os.getloadavg()
    write_results(args.date, args.min_mb, path, info, passes, steps, split, load_start, load_end)
    return 0


def write_results(date: str, min_mb: int, path: Path, info: dict, passes: dict, steps: dict, split: dict,
                  load_start, load_end) -> None:
    import fastwarc
    import resiliparse

    mb, html_mb = info["bytes"] / 1e6, info["html_bytes"] / 1e6
    rows = []
    for name, p in passes.items():
        rows.append(f"| {name} | {p['records']:,} | {p['cpu_s']:.1f} | {p['wall_s']:.1f} | "
                    f"{p['records'] / p['cpu_s']:,.0f} | {mb / p['cpu_s']:.1f} | {html_mb / p['cpu_s']:.1f} |")
    bare, ours = passes["bare read+extract"], passes["pipeline read+extract"]
    read_bare, read_ours = passes["bare read"], passes["pipeline read"]
    text = f"""# Web archives in: read + extract, per core ({date})

Command: `.venv/bin/python bench/bench_warc.py --min-mb {min_mb}`
(`bench/bench_warc.py` says what each pass does). Machine: {os.cpu_count()} cores, Python
{platform.python_version()}, FastWARC {fastwarc.__version__ if hasattr(fastwarc, '__version__') else '2.0.0'},
Resiliparse {resiliparse.__version__ if hasattr(resiliparse, '__version__') else '2.0.0'}; load average
{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end (another job shared the machine when it is
above ~1: CPU seconds are the numbers to trust then).

The WARC: `{path.relative_to(REPO)}`, {mb:.1f} MB stored (per-record gzip), {info['records']:,}
records ({info['responses']:,} responses + their requests) in {info['rounds']} capture rounds of
{info['pages']:,} real HTML pages of the Debian documentation packages pinned in
`bench/build_corpus.py`; {html_mb:.1f} MB of HTML.

Each pass runs in a child process pinned to one CPU; rates are per CPU second (= per core).

| pass | responses | CPU s | wall s | records/s | WARC MB/s | HTML MB/s |
|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

* Reading alone: the pipeline's framing (own gzip members, damage checks, FastWARC parsing) costs
  {read_ours['cpu_s'] / read_bare['cpu_s']:.2f}x the CPU of FastWARC's own reader.
* Read + extract: the pipeline path costs {ours['cpu_s'] / bare['cpu_s']:.2f}x bare FastWARC + Resiliparse
  (overhead {100 * (ours['cpu_s'] / bare['cpu_s'] - 1):.0f}%). It does more per page: the charset order,
  the title, body decoding, the policy, URL keys, the project's text normalization (`nfc-v1`, shared
  with every format), doc_id and content hash. Extraction dominates both.
* Where the CPU of the pipeline path goes (first {steps['records']:,} HTML responses, {steps['cpu_s']:.1f} CPU s):
  {"; ".join(f"{name} {100 * spent / steps['cpu_s']:.0f}%" for name, spent in steps['steps'].items())}.
* Over {split['splits']} splits of 32 MB on {split['workers']} processes the pipeline path read
  {split['records']:,} responses in {split['wall_s']:.1f} s wall ({split['records'] / split['wall_s']:,.0f}
  records/s, {mb / split['wall_s']:.1f} WARC MB/s for the machine), the same records as one reader
  ({ours['records']:,}); bad records: {split['bad']}. This is a wall-clock number: with another job
  on the machine (load above ~1) it shows that splits work, not a speedup.
"""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"warc-{date}.md").write_text(text)
    (RESULTS / f"warc-{date}.json").write_text(json.dumps(
        {"warc": info, "passes": passes, "breakdown": steps, "splits": split, "load": [load_start, load_end]},
        indent=1))
    log(f"results: bench/results/warc-{date}.md")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
