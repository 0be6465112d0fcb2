#!/usr/bin/env python3
"""Build the benchmark corpus (>= 200 MB of real text) from pinned Debian doc packages.

Steps (everything lands under ``bench/work/``, which git ignores):

1. ``apt-get download`` every pinned ``package=version`` into ``bench/work/debs/``
   and check the package name, the version and the .deb's sha256 (a registry
   that serves another version or other bytes stops the build with a clear
   message);
2. ``dpkg-deb -x`` each .deb into ``bench/work/extract/<package>/``;
3. extract the text of every regular ``*.html`` file (``*.page`` Mallard XML for
   ``gnome-user-docs``, which ships no HTML) with the stdlib ``html.parser``:
   ``script``/``style``/``noscript``/``template`` (and Mallard ``info``) are
   skipped, block elements become line breaks, whitespace outside ``pre`` is
   collapsed; one page = one record;
4. write two sources of JSONL.zst files into ``bench/work/corpus/``:

   * ``debian-docs``: every page once (the *unique* text);
   * ``docs-mirror``: two mirror hosts ``m = 1, 2`` copy pages. With
     ``r = sha256(f"{m}:{id}") % 16``, host ``m`` holds a **verbatim** copy when
     ``r < 5`` (an exact duplicate of the original; when both hosts copy a page
     verbatim, the second copy is a repeated record of the mirror source), a
     **perturbed** copy when ``5 <= r < 9`` (the page with one header line
     ``[mirror-<m>.example.net] mirrored copy of <url>`` and a blank line
     prepended: a near duplicate that exact dedup keeps), and nothing otherwise.

   Records in a source are ordered by ``sha256(id)`` (so every file mixes
   packages) and cut into files of ``TARGET_FILE_BYTES`` of JSONL each; each
   file is one zstd frame (level ``ZSTD_LEVEL``, checksum and content size in
   the header, single-threaded): the same inputs give the same bytes.
5. write ``bench/work/corpus.yaml`` (the pipeline config) and
   ``bench/work/corpus/BUILD.json`` (pins, statistics, sha256 of every file).

Cache: when ``BUILD.json`` describes the current recipe and every file still has
the sha256 it lists, nothing is rebuilt.  ``REFERENCE_DIGEST`` is the digest of
the corpus this recipe produced on the reference machine (Python 3.11.7,
zstandard 0.25.0); a different digest (another Python's ``html.parser``, another
zstd) is reported loudly and recorded, because numbers on another corpus are not
comparable.

Usage:  .venv/bin/python bench/build_corpus.py [--force] [--scale | --scale-large | --scale-xl]
"""
from __future__ import annotations

import argparse
import codecs
import concurrent.futures
import dataclasses
import hashlib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from beam_pipeline.records.hashing import sha256_file

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work"
DEBS = WORK / "debs"
EXTRACT = WORK / "extract"
PAGES = WORK / "pages"  # extracted text per package (cache)
TOKENIZER = REPO / "sample" / "tokenizer" / "tokenizer.json"
SAMPLE = REPO / "sample"

EXTRACT_VERSION = 1  # bump when the text extraction changes (invalidates bench/work/pages/)
RECIPE_VERSION = 1  # bump when the record layout or the sources change


@dataclasses.dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sha256: str  # of the .deb
    license: str
    root: str  # folder inside the package whose pages are taken
    suffix: str  # ".html", or ".page" (Mallard XML)


# Debian 12 (bookworm, + bookworm-security). A point release or a security update
# retires a version from the archive: update the pin (version and sha256) and
# REFERENCE_DIGEST, and say so next to the results.
PINS = [
    Pin("apache2-doc", "2.4.71-1~deb12u1",
        "a7b3d1131c1c63dbf9999b28e75f9a133d30f70492b419936bd51759ac77a01f",
        "Apache-2.0", "usr/share/doc/apache2-doc/manual", ".html"),
    Pin("debian-handbook", "11.20220922",
        "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
        "GPL-2.0+ or CC-BY-SA-3.0", "usr/share/doc/debian-handbook/html", ".html"),
    Pin("git-doc", "1:2.39.5-0+deb12u3",
        "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
        "GPL-2.0", "usr/share/doc/git-doc", ".html"),
    Pin("gnome-user-docs", "43.0-2",
        "0d635a840747958ca84da778b40d341f1155603851f922c9a171f5a181d6a39f",
        "CC-BY-SA-3.0", "usr/share/help", ".page"),
    Pin("postgresql-doc-15", "15.20-0+deb12u1",
        "4c44bf2c599f208b3f46454a6cf7a72e25ec46ff74d37b59dd31ad76b00eebb7",
        "PostgreSQL", "usr/share/doc/postgresql-doc-15/html", ".html"),
    Pin("python-django-doc", "3:3.2.25-0+deb12u7",
        "87307f067916df72e17180d35b7cde5c7ea6080336cda518efd7f6e66988a7ca",
        "BSD-3-Clause", "usr/share/doc/python-django-doc/html", ".html"),
    Pin("python-sqlalchemy-doc", "1.4.46+ds1-1",
        "8805c3167ef75278ac6fd58ed9856321c2b2e3a7e441edba84b2eb955216d0fd",
        "MIT", "usr/share/doc/python-sqlalchemy-doc/html", ".html"),
    Pin("python3.11-doc", "3.11.2-6+deb12u9",
        "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be",
        "PSF-2.0", "usr/share/doc/python3.11/html", ".html"),
    Pin("sphinx-doc", "5.3.0-4",
        "1da3d08bb3a0bc82a4b8b8109410e223054bf5fb13904557ec8ea869046f65b4",
        "BSD-2-Clause", "usr/share/doc/sphinx-doc/html", ".html"),
]

# Added for the scale corpus (bench/bench_scale.py): large API references and manuals,
# so that >= 1 GB of text holds ~500 MB of distinct pages, not one page copied many times.
SCALE_PINS = PINS + [
    Pin("erlang-doc", "1:25.2.3+dfsg-1+deb12u4",
        "7d172cecfdd9c2930b27c776ad226ffcc84670375cf830c79ee41c6944e8a1c8",
        "Apache-2.0", "usr/share/doc/erlang-doc", ".html"),
    Pin("libboost1.81-doc", "1.81.0-5+deb12u1",
        "da1e2182ea8955cf6155924066dd611588f855aebf961d0ea0e7ac0092216ebb",
        "BSL-1.0", "usr/share/doc/libboost1.81-doc", ".html"),
    Pin("libstdc++-12-doc", "12.2.0-14+deb12u1",
        "cdfc497c07975678b6145df159bf62587023fcec9d603db06c75547328887dbd",
        "GPL-3.0+ or GFDL-1.3", "usr/share/doc/gcc-12-base/libstdc++", ".html"),
    Pin("linux-doc-6.1", "6.1.192-3",
        "f18dfe28dcab7bdbf9185be16b9521f5841277a6a96c374a6683a648d5d5fa4f",
        "GPL-2.0", "usr/share/doc/linux-doc-6.1/html", ".html"),
    Pin("openjdk-17-doc", "17.0.21.1+2-1~deb12u1",
        "3e04db24dbcb31d598774973998f1d8212e3424e288befbfef235077325f841d",
        "GPL-2.0 with Classpath-exception-2.0", "usr/share/doc/openjdk-17-jre-headless/api", ".html"),
    Pin("python-scipy-doc", "1.10.1-2",
        "a237fdcef1675622f1a5d8a291c64feba140615130ee625554f94772d4ea3ad7",
        "BSD-3-Clause", "usr/share/doc/python-scipy-doc/html", ".html"),
    Pin("rust-doc", "1.63.0+dfsg1-2",
        "96ef96fe6df87d939ca713bd7df3d15c2b778ccb892eca025c4ee504146f697b",
        "MIT or Apache-2.0", "usr/share/doc/rust-doc/html", ".html"),
]

PRIMARY, MIRROR = "debian-docs", "docs-mirror"
MIRRORS = 2  # mirror hosts
# Host m holds page `id` when r = sha256(f"{m}:{id}") % MIRROR_MODULUS is below
# COPY_BELOW: verbatim when r < VERBATIM_BELOW, else with a header line.
MIRROR_MODULUS, VERBATIM_BELOW, COPY_BELOW = 16, 5, 9
MIN_TOTAL_BYTES = 200_000_000  # of text, all records of both sources
TARGET_FILE_BYTES = 32 << 20  # of JSONL per file (uncompressed)
ZSTD_LEVEL = 10

# sha256 over "<relative path> <sha256>\n" of every corpus file, as built on the
# reference machine (see the module docstring). None: not yet recorded.
REFERENCE_DIGEST = "7ff76bb80101aa3b76cf42af60df0e66269ea30d9ded09975d4d67ee95559f34"

# The blocks both corpus configs share (format fields: primary, mirror, tokenizer).
_SOURCES = """\
sources:
  - name: {primary}
    uri: corpus/{primary}/*.jsonl.zst
    format: jsonl
    rank: 1
    license: see-record
    domain: docs
  - name: {mirror}
    uri: corpus/{mirror}/*.jsonl.zst
    format: jsonl
    rank: 5
    license: see-record
    domain: web

ingest:
  max_record_bytes: 8388608
"""
#: The tokenize block of the corpus configs (bench_side_by_side.py's whole job uses it too).
TOKENIZE_BLOCK = """\
tokenize:
  tokenizer: {tokenizer}
  eos_token: "<|endoftext|>"
  pad_token: "<|pad|>"
  seq_len: 8192
  shard_tokens: 16777216
"""

CONFIG_TEMPLATE = """\
# Benchmark corpus written by bench/build_corpus.py (do not edit: regenerated).
# Sources: pages of pinned Debian documentation packages (see bench/README.md).
name: bench-debian-docs
output_root: out                  # bench/run_all.py passes a fresh --output_root
seed: 20261202

""" + _SOURCES + """
policy:
  drop_exact_duplicates: true
  min_chars: 1
  max_chars: 2000000
  min_words: 5

""" + TOKENIZE_BLOCK + """
layout:
  target_partition_bytes: 67108864
  min_partitions: 4
"""

# The scale corpus (bench/bench_scale.py): the whole cascade of the sample's config
# (near dedup, seven scorers, policy rules) on >= 1 GB; the sample's models,
# blocklists and eval passages. Stage settings a crawl would use: boilerplate lines
# need 1,000 documents, no exact-substring pass.
SCALE_CONFIG_TEMPLATE = """\
# Scale corpus written by bench/build_corpus.py --scale (do not edit: regenerated).
name: bench-scale
output_root: out                  # bench/bench_scale.py passes a fresh --output_root
seed: 20261202

""" + _SOURCES + """
near_dedup:
  enabled: true
  method: minhash
  shingles: {{kind: word, size: 5}}
  minhash: {{num_perm: 112, threshold: 0.7}}
  verify: signature
  max_rounds: 12
  max_cluster_size: 100
  lines: {{enabled: true, min_repeats: 1000, min_chars: 30}}

policy:
  drop_exact_duplicates: true
  drop_near_duplicates: true
  min_chars: 1
  max_chars: 2000000
  min_words: 5
  redact: {{enabled: true}}
  rules:
    - {{reason: not_english, drop_if: "language.lang != 'en' and language.confidence >= 0.65"}}
    - {{reason: repetitive, drop_if: "heuristics.rep_dup_line_frac > 0.3 or heuristics.rep_dup_10gram > 0.6"}}
    - {{reason: blocked_url, drop_if: "blocklist.blocked"}}
    - {{reason: low_quality, drop_if: "quality.score < 0.1"}}
    - {{reason: bad_words, drop_if: "safety.badword_ratio > 0.005"}}
    - {{reason: contains_secret, drop_if: "pii.secret > 0"}}
    - {{reason: eval_contamination, drop_if: "decontamination.contaminated"}}

cascade: [language, heuristics, blocklist, quality, safety, pii, decontamination]
blocklist:
  domain_files: [{sample}/blocklists/domains.txt]
  url_substring_files: [{sample}/blocklists/url_substrings.txt]
quality:
  model: {sample}/models/quality.bin
decontamination:
  evalsets:
    - {{name: passages, path: {sample}/evalsets/passages.jsonl}}
  index: true

""" + TOKENIZE_BLOCK + """
layout:
  min_partitions: 4
"""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One corpus: which packages, how many mirror hosts, where it goes, its config."""

    name: str
    pins: list
    mirrors: int
    min_total_bytes: int
    folder: Path  # the JSONL.zst files and BUILD.json
    config: Path  # the pipeline config written next to them
    config_template: str
    reference_digest: str | None

    @property
    def build_json(self) -> Path:
        return self.folder / "BUILD.json"


SPINE = Recipe("spine", PINS, MIRRORS, MIN_TOTAL_BYTES, WORK / "corpus", WORK / "corpus.yaml",
               CONFIG_TEMPLATE, REFERENCE_DIGEST)
# Not recorded yet on a reference machine: the first build prints its digest.
SCALE = Recipe("scale", SCALE_PINS, 3, 1_000_000_000, WORK / "scale" / "corpus", WORK / "scale" / "corpus.yaml",
               SCALE_CONFIG_TEMPLATE, None)
# Twice the scale corpus and more (bench/bench_scale.py --corpus scale-large, for the local runner's
# ceiling): the same pages, eight mirror hosts (hosts 1-3 copy exactly what they copy in SCALE).
SCALE_LARGE = Recipe("scale-large", SCALE_PINS, 8, 2_000_000_000, WORK / "scale-large" / "corpus",
                     WORK / "scale-large" / "corpus.yaml", SCALE_CONFIG_TEMPLATE, None)
# Four times the scale corpus (bench/bench_scale.py --corpus scale-xl: 1 GB against 4 GB on embedded
# Flink). There is no more distinct real text offline than SCALE_PINS' ~381 MB, so the 4 GB are the same
# pages with seventeen mirror hosts (each holds 9/16 of the pages, ~218 MB: 381 + 17 x 218 > 4,000 MB);
# hosts 1-3 copy exactly what they copy in SCALE, hosts 1-8 what they copy in SCALE_LARGE.
SCALE_XL = Recipe("scale-xl", SCALE_PINS, 17, 4_000_000_000, WORK / "scale-xl" / "corpus",
                  WORK / "scale-xl" / "corpus.yaml", SCALE_CONFIG_TEMPLATE, None)


def log(msg: str) -> None:
    print(f"[build_corpus] {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"[build_corpus] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)



def recipe(spec: Recipe = SPINE) -> dict:
    """Everything that determines the corpus bytes (besides Python and zstandard)."""
    return {"recipe_version": RECIPE_VERSION, "extract_version": EXTRACT_VERSION,
            "pins": [dataclasses.asdict(p) for p in spec.pins],
            "mirrors": spec.mirrors, "mirror_modulus": MIRROR_MODULUS,
            "verbatim_below": VERBATIM_BELOW, "copy_below": COPY_BELOW,
            "target_file_bytes": TARGET_FILE_BYTES, "zstd_level": ZSTD_LEVEL,
            "config": spec.config_template}


def recipe_digest(spec: Recipe = SPINE) -> str:
    return hashlib.sha256(json.dumps(recipe(spec), sort_keys=True).encode()).hexdigest()


def corpus_digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
                          .encode()).hexdigest()


# --------------------------------------------------------------------------
# Fetch and unpack


def deb_path(pin: Pin) -> Path:
    return DEBS / f"{pin.package}_{pin.version.replace(':', '%3a')}_all.deb"


def fetch(pins: list[Pin]) -> None:
    """apt-get download the pins whose .deb is missing; check name, version, sha256."""
    DEBS.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pins if not deb_path(p).exists() or sha256_file(deb_path(p)) != p.sha256]
    if not missing:
        log(f"{len(pins)} .deb files present with the pinned sha256")
        return
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        fail("apt-get and dpkg-deb are required (a Debian 12 host)")
    tmp = DEBS / ".download"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    cmd = ["apt-get", "download", "-q"]
    if os.geteuid() == 0:  # root: don't drop to _apt, which cannot write here
        cmd += ["-o", "APT::Sandbox::User=root"]
    cmd += [f"{p.package}={p.version}" for p in missing]
    log("apt-get download " + " ".join(f"{p.package}={p.version}" for p in missing))
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0:
        fail("apt-get download failed. Run `apt-get update` first; if a pinned version is still "
             "missing, the archive has retired it (point release or security update): update the pin "
             "(version + sha256) in bench/build_corpus.py and REFERENCE_DIGEST, and rerun.\n"
             + proc.stderr.strip())
    wanted = {p.package: p for p in missing}
    for deb in sorted(tmp.glob("*.deb")):
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"],
                                capture_output=True, text=True, check=True).stdout
        info = dict(line.split(": ", 1) for line in fields.splitlines())
        pin = wanted.pop(info["Package"], None)
        if pin is None:
            fail(f"unexpected package downloaded: {deb.name}")
        if info["Version"] != pin.version:
            fail(f"{pin.package}: the registry served version {info['Version']}, pinned {pin.version}")
        digest = sha256_file(deb)
        if digest != pin.sha256:
            fail(f"{pin.package} {pin.version}: sha256 {digest}, pinned {pin.sha256}")
        deb.rename(deb_path(pin))
    if wanted:
        fail(f"apt-get download did not produce: {sorted(wanted)}")
    shutil.rmtree(tmp, ignore_errors=True)


def unpack(pin: Pin) -> Path:
    target = EXTRACT / pin.package
    marker = target / f".unpacked-{pin.sha256[:16]}"
    if not marker.exists():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb_path(pin)), str(target)], check=True)
        marker.touch()
    root = target / pin.root
    if not root.is_dir():
        fail(f"{pin.package}: {pin.root} not found in the package")
    return root


# --------------------------------------------------------------------------
# Text extraction (stdlib html.parser only)

BLOCK_TAGS = frozenset("""
address article aside blockquote body br caption dd details dialog div dl dt fieldset figcaption
figure footer form h1 h2 h3 h4 h5 h6 head header hr html legend li main nav ol p pre section summary
table tbody td tfoot th thead title tr ul
page item list steps terms tree note screen synopsis example quote comment figure media links
""".split())  # the last line: Mallard block elements (gnome-user-docs)
SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "info"})  # info: Mallard metadata
PRE_TAGS = frozenset({"pre", "textarea", "screen"})
_SPACE = re.compile(r"\s+")
_BLANK_RUN = re.compile(r"\n{3,}")
_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


class TextExtractor(html.parser.HTMLParser):
    """Visible text of an HTML (or Mallard) page; blocks as lines, ``pre`` kept verbatim."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0
        self.line_start = True

    def _newline(self) -> None:
        self.parts.append("\n")
        self.line_start = True

    def handle_starttag(self, tag, attrs):
        if tag in SKIP_TAGS:
            self.skip += 1
        elif tag in BLOCK_TAGS:
            self._newline()
        if tag in PRE_TAGS:
            self.pre += 1

    def handle_endtag(self, tag):
        if tag in SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag in BLOCK_TAGS:
            self._newline()
        if tag in PRE_TAGS:
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data):
        if self.skip or not data:
            return
        if not self.pre:
            data = _SPACE.sub(" ", data)
            if self.line_start:
                data = data.lstrip(" ")
            if not data:
                return
            self.line_start = False
        else:
            self.line_start = data.endswith("\n")
        self.parts.append(data)

    def text(self) -> str:
        lines = "".join(self.parts).split("\n")
        return _BLANK_RUN.sub("\n\n", "\n".join(line.rstrip() for line in lines)).strip()


def decode_page(raw: bytes) -> str:
    match = _CHARSET.search(raw[:4096])
    encoding = "utf-8"
    if match:
        try:
            encoding = codec_name(match.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):
            encoding = "utf-8"
    return raw.decode(encoding, errors="replace")


def codec_name(label: str) -> str:
    return codecs.lookup(label).name


def page_text(path: str) -> str:
    parser = TextExtractor()
    parser.feed(decode_page(Path(path).read_bytes()))
    parser.close()
    return parser.text()


def list_pages(pin: Pin, root: Path) -> list[tuple[str, Path]]:
    """(relative path, file) of every regular page file, sorted by relative path."""
    pages = []
    for path in root.rglob(f"*{pin.suffix}"):
        if path.is_symlink() or not path.is_file():
            continue  # apache2-doc links missing translations to the English page
        pages.append((path.relative_to(root).as_posix(), path))
    return sorted(pages)


def extract_package(pin: Pin, pool) -> list[dict]:
    """Records of every page of one package, in path order (cached in bench/work/pages/)."""
    import zstandard

    py = "".join(map(str, sys.version_info[:3]))
    cache = PAGES / f"{pin.package}-{pin.sha256[:16]}-x{EXTRACT_VERSION}-py{py}.jsonl.zst"
    if cache.exists():
        data = zstandard.ZstdDecompressor().decompress(cache.read_bytes())
        return [json.loads(line) for line in data.splitlines()]
    root = unpack(pin)
    pages = list_pages(pin, root)
    started = time.monotonic()
    texts = list(pool.map(page_text, [str(path) for _, path in pages], chunksize=16))
    log(f"{pin.package} {pin.version}: {len(pages)} {pin.suffix} pages extracted in "
        f"{time.monotonic() - started:.0f}s")
    records = [{"id": f"{pin.package}/{rel}", "url": f"https://{pin.package}.docs.example.org/{rel}",
                "license": pin.license, "text": text, "package": pin.package}
               for (rel, _), text in zip(pages, texts)]
    PAGES.mkdir(parents=True, exist_ok=True)
    data = b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records)
    tmp = cache.with_suffix(".tmp")
    tmp.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    tmp.rename(cache)
    return records


def extract_all(pins: list[Pin]) -> list[dict]:
    """Records of every page of every pin, in (package, path) order."""
    workers = max(1, min(2, os.cpu_count() or 1))
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        return [record for pin in pins for record in extract_package(pin, pool)]


# --------------------------------------------------------------------------
# Sources


def _h(value: str) -> int:
    return int(hashlib.sha256(value.encode("utf-8")).hexdigest(), 16)


def mirror_copies(page: dict, mirrors: int) -> list[dict]:
    copies = []
    for m in range(1, mirrors + 1):
        host = f"mirror-{m}.example.net"
        r = _h(f"{m}:{page['id']}") % MIRROR_MODULUS
        if r >= COPY_BELOW:
            continue
        verbatim = r < VERBATIM_BELOW
        text = page["text"] if verbatim else f"[{host}] mirrored copy of {page['url']}\n\n{page['text']}"
        copies.append({"id": f"{host}/{page['id']}", "url": f"https://{host}/{page['id']}",
                       "license": page["license"], "text": text, "verbatim": verbatim})
    return copies


def record_line(record: dict) -> bytes:
    out = {k: record[k] for k in ("id", "url", "license", "text")}
    return (json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def write_source(spec: Recipe, name: str, records: list[dict]) -> dict[str, str]:
    """Write one source's files; return {path relative to the config's folder: sha256}."""
    import zstandard

    base = spec.config.parent
    folder = spec.folder / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ordered = sorted(records, key=lambda r: (hashlib.sha256(r["id"].encode()).hexdigest(), r["id"]))
    files, chunk, size = {}, [], 0

    def flush():
        path = folder / f"part-{len(files):05d}.jsonl.zst"
        data = b"".join(chunk)
        cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True,
                                        threads=0)
        path.write_bytes(cctx.compress(data))
        files[path.relative_to(base).as_posix()] = sha256_file(path)
        log(f"wrote {path.relative_to(REPO)}: {len(chunk)} records, {len(data) / 1e6:.1f} MB of JSONL, "
            f"{path.stat().st_size / 1e6:.1f} MB compressed")

    for record in ordered:
        line = record_line(record)
        if chunk and size + len(line) > TARGET_FILE_BYTES:
            flush()
            chunk, size = [], 0
        chunk.append(line)
        size += len(line)
    if chunk:
        flush()
    return files


def text_bytes(records: list[dict]) -> int:
    return sum(len(r["text"].encode("utf-8")) for r in records)


def build(spec: Recipe = SPINE) -> dict:
    started = time.monotonic()
    fetch(spec.pins)
    pages = extract_all(spec.pins)
    mirrors = [copy for page in pages for copy in mirror_copies(page, spec.mirrors)]
    unique, total = text_bytes(pages), text_bytes(pages) + text_bytes(mirrors)
    if total < spec.min_total_bytes:
        fail(f"only {total} bytes of text (< {spec.min_total_bytes}); raise the mirror hosts of {spec.name}")
    shutil.rmtree(spec.folder, ignore_errors=True)
    spec.folder.mkdir(parents=True)
    files = {**write_source(spec, PRIMARY, pages), **write_source(spec, MIRROR, mirrors)}
    spec.config.write_text(spec.config_template.format(primary=PRIMARY, mirror=MIRROR, tokenizer=TOKENIZER,
                                                       sample=SAMPLE))
    per_package = {}
    for pin in spec.pins:
        own = [p for p in pages if p["package"] == pin.package]
        per_package[pin.package] = {"version": pin.version, "pages": len(own), "text_bytes": text_bytes(own),
                                    "empty_pages": sum(1 for p in own if not p["text"])}
    distinct_texts = {hashlib.sha256(p["text"].encode()).digest(): len(p["text"].encode()) for p in pages}
    stats = {
        "pages": len(pages),
        "records": {PRIMARY: len(pages), MIRROR: len(mirrors)},
        "text_bytes": {PRIMARY: unique, MIRROR: text_bytes(mirrors), "total": total},
        "unique_text_bytes": unique,
        "distinct_page_texts": len(distinct_texts),
        "distinct_text_bytes": sum(distinct_texts.values()),
        "verbatim_mirror_copies": sum(1 for m in mirrors if m["verbatim"]),
        "perturbed_mirror_copies": sum(1 for m in mirrors if not m["verbatim"]),
        "jsonl_bytes": sum(len(record_line(r)) for r in pages + mirrors),
        "compressed_bytes": sum((spec.config.parent / f).stat().st_size for f in files),
        "per_package": per_package,
    }
    build_info = {"recipe_digest": recipe_digest(spec), "recipe": recipe(spec), "files": files,
                  "corpus_digest": corpus_digest(files), "stats": stats,
                  "python": sys.version.split()[0], "zstandard": _zstd_version(),
                  "build_seconds": round(time.monotonic() - started, 1)}
    spec.build_json.write_text(json.dumps(build_info, indent=1, sort_keys=True) + "\n")
    return build_info


def _zstd_version() -> str:
    import zstandard

    return zstandard.__version__


def cached(spec: Recipe = SPINE) -> dict | None:
    """BUILD.json if it describes this recipe and every file still matches, else None."""
    if not spec.build_json.exists() or not spec.config.exists():
        return None
    try:
        info = json.loads(spec.build_json.read_text())
    except ValueError:
        return None
    if info.get("recipe_digest") != recipe_digest(spec):
        return None
    base = spec.config.parent
    for name, digest in info["files"].items():
        path = base / name
        if not path.exists() or sha256_file(path) != digest:
            log(f"{name} is missing or changed: rebuilding")
            return None
    present = {p.relative_to(base).as_posix() for p in spec.folder.rglob("*.jsonl.zst")}
    if present != set(info["files"]):
        return None
    return info


def ensure_corpus(force: bool = False, spec: Recipe = SPINE) -> dict:
    """Build the corpus unless an identical one is cached; return BUILD.json's content."""
    info = None if force else cached(spec)
    if info is not None:
        log(f"cached corpus {info['corpus_digest'][:16]} in {spec.folder.relative_to(REPO)} (digests verified)")
    else:
        info = build(spec)
    reference = spec.reference_digest
    info["reference_digest"] = reference
    info["matches_reference"] = reference is not None and info["corpus_digest"] == reference
    if reference is None:
        log(f"corpus digest {info['corpus_digest']} (no reference recorded yet)")
    elif not info["matches_reference"]:
        log(f"WARNING: corpus digest {info['corpus_digest']} differs from the reference {reference} "
            f"(Python {info['python']}, zstandard {info['zstandard']}): results are not comparable "
            f"with the published ones")
    stats = info["stats"]
    log(f"{stats['pages']} pages; text: {stats['unique_text_bytes'] / 1e6:.1f} MB unique, "
        f"{stats['text_bytes']['total'] / 1e6:.1f} MB total in {len(info['files'])} files "
        f"({stats['compressed_bytes'] / 1e6:.1f} MB compressed)")
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the cached corpus matches")
    parser.add_argument("--scale", action="store_true",
                        help="the >= 1 GB scale corpus (bench/work/scale/) instead of the spine corpus")
    parser.add_argument("--scale-large", action="store_true",
                        help="the >= 2 GB corpus (bench/work/scale-large/: the scale corpus's pages, 8 mirror hosts)")
    parser.add_argument("--scale-xl", action="store_true",
                        help="the >= 4 GB corpus (bench/work/scale-xl/: the scale corpus's pages, 17 mirror hosts)")
    args = parser.parse_args()
    spec = (SCALE_XL if args.scale_xl else SCALE_LARGE if args.scale_large else SCALE if args.scale else SPINE)
    ensure_corpus(force=args.force, spec=spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
