"""Decontamination: word n-gram overlap between documents and evaluation sets.

The approach of GPT-3 (Brown et al. 2020, appendix C: 13-gram overlap) and
of most open pipelines since: a document is contaminated by an eval set when
they share at least ``min_overlap`` word n-grams (default n = 13).

Normalization (the same for documents, eval items and the retained index):
lower-case, words are maximal runs of Unicode letters/digits (``\\w+``), so
punctuation, markup and whitespace differences do not hide an overlap.
An n-gram is identified by a 64-bit hash: each word is hashed with xxh3-64
(seed :data:`WORD_SEED`), and the n word hashes are combined by a polynomial
over 2^64 followed by a splitmix64 finalizer, vectorized with numpy. The
hash is part of the index format (``docs/filters.md``): changing it changes
:data:`INDEX_FORMAT`.

Eval items with fewer than n words yield no n-gram and are reported as
``short_items`` (they cannot be checked at this n).

Eval sets are files: ``.jsonl`` (one object per line, the text in a field,
default ``text``; an ``id`` field names items in reports) or ``.txt`` (one
item per line).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Iterable

import numpy as np
import xxhash

from beam_pipeline.filters.lowered_words import lowered_words
from beam_pipeline.records.hashing import splitmix64

WORD_SEED = 0x5EED_13
INDEX_FORMAT = "ngram-xxh3w-poly-splitmix64-v1"
_WORD = re.compile(r"\w+")
_MULTIPLIER = np.uint64(0x100000001B3)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def word_hash(word: str) -> int:
    """The 64-bit hash of a word (xxh3-64 of its UTF-8, seed :data:`WORD_SEED`)."""
    return xxhash.xxh3_64_intdigest(word.encode("utf-8"), seed=WORD_SEED)


def ngram_hashes(text: str, n: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """uint64 hashes of every word n-gram of ``text`` (in order; repeats kept).

    The words are those of :func:`words`, found by a compiled loop over the code points of the lower-cased
    text (:func:`.lowered_words`, shared with the safety scorer), which also numbers the distinct ones: only
    those become Python strings and get hashed (2.5x cheaper on the sample than ``findall`` and a dict
    lookup per word).
    """
    found = lowered_words(text)
    distinct, ids = found.distinct, found.ids
    if len(ids) < n:
        return np.empty(0, dtype=np.uint64)
    if cache is None:
        hashed = list(map(word_hash, distinct))
    else:
        for w in distinct:
            if w not in cache:
                cache[w] = word_hash(w)
        hashed = list(map(cache.__getitem__, distinct))
    base = np.array(hashed, dtype=np.uint64)[ids]
    with np.errstate(over="ignore"):
        rolling = base[: len(base) - n + 1].copy()
        for i in range(1, n):
            rolling = rolling * _MULTIPLIER + base[i : len(base) - n + 1 + i]
        return splitmix64(rolling)


@dataclasses.dataclass
class EvalSet:
    """The distinct n-gram hashes of one eval set (sorted), with item counts."""

    name: str
    hashes: np.ndarray
    items: int
    short_items: int

    def overlap(self, document_hashes: np.ndarray) -> int:
        """Distinct n-grams of the document that occur in this eval set."""
        if document_hashes.size == 0 or self.hashes.size == 0:
            return 0
        at = np.searchsorted(self.hashes, document_hashes)
        at[at == self.hashes.size] = 0
        matched = document_hashes[self.hashes[at] == document_hashes]
        return int(np.unique(matched).size) if matched.size else 0


def read_items(path: str, field: str = "text") -> list[tuple[str, str]]:
    """[(item id, text)] of an eval-set file (``.jsonl`` objects or ``.txt`` lines)."""
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        content = f.read().decode("utf-8")
    items = []
    is_jsonl = path.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".json"))
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        if is_jsonl:
            try:
                record = json.loads(line)
                text = record[field]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: expected a JSON object with a {field!r} field ({err})") from None
            items.append((str(record.get("id", number)), str(text)))
        else:
            items.append((str(number), line))
    return items


def build_evalset(name: str, items: Iterable[tuple[str, str]], n: int) -> EvalSet:
    parts, count, short = [], 0, 0
    cache: dict[str, int] = {}
    for _, text in items:
        count += 1
        hashes = ngram_hashes(text, n, cache)
        if hashes.size == 0:
            short += 1
        parts.append(hashes)
    merged = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)
    return EvalSet(name=name, hashes=merged, items=count, short_items=short)


def score(
    evalsets: list[EvalSet], text: str, n: int, min_overlap: int = 1, cache: dict[str, int] | None = None
) -> dict:
    """The ``decontamination`` layer row (minus ids) for one document."""
    hashes = ngram_hashes(text, n, cache)
    hits = {}
    for evalset in evalsets:
        found = evalset.overlap(hashes)
        if found >= min_overlap:
            hits[evalset.name] = found
    return {"contaminated": bool(hits), "evalsets": ",".join(sorted(hits)) or None, "ngrams": sum(hits.values())}


def index_rows(documents: Iterable[tuple[str, str]], n: int) -> tuple[np.ndarray, list[str]]:
    """(sorted distinct n-gram hashes, doc_id of each) for a set of (doc_id, text)."""
    hash_parts, doc_parts, doc_ids = [], [], []
    cache: dict[str, int] = {}
    for doc_id, text in documents:
        hashes = np.unique(ngram_hashes(text, n, cache))
        if hashes.size:
            hash_parts.append(hashes)
            doc_parts.append(np.full(hashes.size, len(doc_ids), dtype=np.int64))
            doc_ids.append(doc_id)
    if not hash_parts:
        return np.empty(0, dtype=np.uint64), []
    hashes = np.concatenate(hash_parts)
    owners = np.concatenate(doc_parts)
    doc_order = np.array(doc_ids, dtype=object)
    # sort by (hash, doc_id): doc ids are compared through their rank in sorted order
    rank = np.empty(len(doc_ids), dtype=np.int64)
    rank[np.argsort(doc_order, kind="stable")] = np.arange(len(doc_ids))
    order = np.lexsort((rank[owners], hashes))
    return hashes[order], [doc_ids[i] for i in owners[order]]
