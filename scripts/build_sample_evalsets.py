#!/usr/bin/env python3
"""Build the demo eval set ``sample/evalsets/passages.jsonl``: half of it leaks into the sample.

An eval set of reading-comprehension-style passages, made so that the
demo's decontamination stage has something to find:

* 8 items are **contaminated on purpose**: for the 8 Wikipedia articles of the
  sample with the smallest sha256(url) (among articles with a paragraph of at
  least 60 words), the first 60 words of their first such paragraph, verbatim
  (CC BY-SA 3.0, Wikipedia contributors; the article URL is in ``source``).
* 8 items are **clean**: the first paragraph (at least 20 words) of the
  docstrings of 8 fixed public classes of Apache Beam 2.77.0 (Apache-2.0, the
  Apache Software Foundation), text that is not in the sample.

The script checks both halves against the sample with the pipeline's own
13-gram hashing (``beam_pipeline.filters.decontamination``): every leaked
item must share n-grams with the sample and no clean item may. Output is
byte-identical on rerun.

Usage:  .venv/bin/python scripts/build_sample_evalsets.py
"""
from __future__ import annotations

import hashlib
import inspect
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

LEAKED, CLEAN, WORDS = 8, 8, 60
BEAM_OBJECTS = [
    "apache_beam.transforms.util.Reshuffle",
    "apache_beam.transforms.util.BatchElements",
    "apache_beam.io.textio.ReadFromText",
    "apache_beam.transforms.core.GroupByKey",
    "apache_beam.transforms.core.CombinePerKey",
    "apache_beam.utils.shared.Shared",
    "apache_beam.transforms.core.ParDo",
    "apache_beam.transforms.util.GroupIntoBatches",
]


def leaked_items(sample: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows = []
    for path in sorted((sample / "data" / "wikipedia").glob("*.parquet")):
        rows.extend(pq.read_table(path, columns=["url", "text"]).to_pylist())
    items = []
    for row in sorted(rows, key=lambda r: hashlib.sha256(r["url"].encode()).hexdigest()):
        paragraph = next((p for p in row["text"].split("\n\n") if len(p.split()) >= WORDS), None)
        if paragraph is None or any(i["source"] == row["url"] for i in items):
            continue
        items.append({"id": f"leaked-{len(items) + 1:02d}", "text": " ".join(paragraph.split()[:WORDS]),
                      "source": row["url"], "license": "CC-BY-SA-3.0"})
        if len(items) == LEAKED:
            break
    return items


def clean_items() -> list[dict]:
    import importlib

    items = []
    for dotted in BEAM_OBJECTS:
        module, _, name = dotted.rpartition(".")
        doc = inspect.getdoc(getattr(importlib.import_module(module), name)) or ""
        paragraph = next((" ".join(p.split()) for p in doc.split("\n\n") if len(p.split()) >= 20), None)
        if paragraph is None:
            sys.exit(f"build_sample_evalsets: {dotted} has no docstring paragraph of 20+ words")
        items.append({"id": f"clean-{len(items) + 1:02d}", "text": paragraph,
                      "source": f"apache-beam 2.77.0 docstring of {dotted}", "license": "Apache-2.0"})
    return items


def check(items: list[dict], sample: Path) -> None:
    from train_tokenizer import iter_texts

    from beam_pipeline.filters.decontamination import build_evalset, ngram_hashes

    import numpy as np

    corpus = np.unique(np.concatenate([ngram_hashes(t, 13) for t in iter_texts(sample)]))
    for item in items:
        hashes = build_evalset(item["id"], [(item["id"], item["text"])], 13).hashes
        shared = int(np.isin(hashes, corpus).sum())
        leaked = item["id"].startswith("leaked")
        if leaked and shared == 0 or not leaked and shared:
            sys.exit(f"build_sample_evalsets: {item['id']} shares {shared} 13-grams with the sample")


def main() -> int:
    sample = REPO / "sample"
    items = leaked_items(sample) + clean_items()
    check(items, sample)
    out = sample / "evalsets" / "passages.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(i, ensure_ascii=False, sort_keys=True) + "\n" for i in items), encoding="utf-8")
    print(f"{out.relative_to(REPO)}: {len(items)} items, sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
