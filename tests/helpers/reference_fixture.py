"""Build the real-text fixture of the reference comparison: pages of pinned Debian documentation packages.

``tests/test_heuristics_reference.py`` runs datatrove's filters and this
project's reference definitions on the bundled sample (815 documents) plus
the pages written here, so that the comparison covers several kinds of text:
prose and reference manuals (PostgreSQL, Django, Git, Apache), Java API pages
(OpenJDK), help pages and a handbook in many languages (GNOME user docs,
Debian handbook: de, fr, ja, ko, ru, zh, ...).

How (deterministic; the packages and the text extraction are
``bench/build_corpus.py``'s, so the pages are exactly the benchmark corpus's):

1. ``apt-get download`` each pinned ``package=version`` of :data:`PACKAGES`,
   check its sha256, ``dpkg-deb -x``, extract the visible text of each page
   with ``bench/build_corpus.py``'s stdlib ``html.parser`` extractor;
2. keep the pages with 1 to :data:`MAX_CHARS` characters, order them by
   ``sha256(id)`` within each package and take the first :data:`PAGES` of each;
3. write them as JSON Lines (``id``, ``package``, ``license``, ``text``), one
   zstd frame (level 19, single-threaded), to :data:`FIXTURE`.

The file is committed: the test reads it and needs no network.

    .venv/bin/python -m tests.helpers.reference_fixture       # rebuild (needs apt-get update first)
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "heuristics_reference" / "pages.jsonl.zst"
MAX_CHARS = 30_000
#: package -> pages taken
PAGES = {
    "apache2-doc": 600,
    "debian-handbook": 900,
    "git-doc": 200,
    "gnome-user-docs": 1100,
    "openjdk-17-doc": 900,
    "postgresql-doc-15": 500,
    "python-django-doc": 400,
}


def _build_corpus():
    sys.path.insert(0, str(REPO / "bench"))
    import build_corpus

    return build_corpus


def _order(page_id: str) -> str:
    return hashlib.sha256(page_id.encode("utf-8")).hexdigest()


def build() -> list[dict]:
    corpus = _build_corpus()
    pins = {pin.package: pin for pin in corpus.SCALE_PINS}
    chosen = [pins[name] for name in PAGES]
    corpus.fetch(chosen)
    records = corpus.extract_all(chosen)
    out = []
    for pin in chosen:
        pages = [r for r in records if r["package"] == pin.package and 0 < len(r["text"]) <= MAX_CHARS]
        pages.sort(key=lambda r: _order(r["id"]))
        taken = pages[:PAGES[pin.package]]
        if len(taken) < PAGES[pin.package]:
            raise SystemExit(f"{pin.package}: {len(taken)} pages of 1..{MAX_CHARS} characters, "
                             f"{PAGES[pin.package]} wanted")
        out.extend({"id": r["id"], "package": pin.package, "version": pin.version, "license": pin.license,
                    "text": r["text"]} for r in taken)
    return out


def write(records: list[dict]) -> None:
    import zstandard

    data = b"".join((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8") for r in records)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    compressor = zstandard.ZstdCompressor(level=19, threads=0, write_checksum=True, write_content_size=True)
    FIXTURE.write_bytes(compressor.compress(data))


def read() -> list[dict]:
    """The fixture's records, in file order."""
    import zstandard

    with open(FIXTURE, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    return [json.loads(line) for line in io.BytesIO(data).read().decode("utf-8").splitlines()]


def sample_documents() -> list[dict]:
    """The bundled sample's documents (``id``, ``kind`` = source, ``text``), in a fixed order."""
    import gzip

    import pyarrow.parquet as pq
    import zstandard

    data = REPO / "sample" / "data"
    out = []
    for path in sorted((data / "python-docs").glob("*.jsonl.zst")):
        with open(path, "rb") as f:
            lines = zstandard.ZstdDecompressor().stream_reader(f).read().decode("utf-8").splitlines()
        out.extend({"id": f"python-docs/{r['id']}", "kind": "python-docs", "text": r["text"]}
                   for r in map(json.loads, lines))
    for path in sorted((data / "python-docs-mirror").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out.extend({"id": f"python-docs-mirror/{r['id']}", "kind": "python-docs-mirror", "text": r["text"]}
                       for r in map(json.loads, f))
    for path in sorted((data / "wikipedia").glob("*.parquet")):
        table = pq.read_table(path, columns=["id", "text"]).to_pylist()
        out.extend({"id": f"wikipedia/{r['id']}", "kind": "wikipedia", "text": r["text"]} for r in table)
    for path in sorted((data / "debian-copyright").glob("*.txt")):
        out.append({"id": f"debian-copyright/{path.stem}", "kind": "debian-copyright",
                    "text": path.read_text(encoding="utf-8")})
    return out


def documents() -> list[dict]:
    """Every document of the comparison: the sample's, then the fixture's pages (``kind`` = package)."""
    return sample_documents() + [{"id": f"deb/{r['id']}", "kind": r["package"], "text": r["text"]} for r in read()]


def main() -> int:
    records = build()
    write(records)
    digest = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    print(f"wrote {FIXTURE}: {len(records)} pages, {sum(len(r['text']) for r in records):,} characters, "
          f"{FIXTURE.stat().st_size:,} bytes, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
