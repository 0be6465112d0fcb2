#!/usr/bin/env python3
"""Train the demo quality classifier ``sample/models/quality.bin`` from the sample itself.

What it learns, honestly: **prose and documentation paragraphs versus license
boilerplate and word salad**. It is a demonstration of the mechanics (a
fastText model path in the config, a learned score in a layer, a policy rule
over it), not a web-quality model:

* positives: paragraphs of at least 25 words from ``python-docs`` (the
  reStructuredText of the Python docs) and ``wikipedia`` (article text);
* negatives: paragraphs of at least 10 words from ``debian-copyright`` (license
  and copyright boilerplate), and *shuffled-word* copies of positive paragraphs
  (the same words in a seeded random order: fluent vocabulary, no syntax);
* at most 2,500 paragraphs per class, chosen by a hash of their text.

It is trained on the same sample the demo then scores, so its scores on the
sample are optimistic (the held-out split is by paragraph, not by document).

The examples are written as JSONL to a temporary folder and passed to the
project's own command, ``python -m beam_pipeline train-quality`` (dim 16,
one thread, fixed seed, quantized keeping the 5,000 most useful words and
n-grams: about 110 KB), so the model is byte-identical on rerun
(``--verify`` trains twice and compares sha256). Output:
``sample/models/quality.bin`` and ``sample/models/quality.bin.metrics.json``.

Usage:  .venv/bin/python scripts/train_sample_models.py [--verify]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from train_tokenizer import _jsonl_texts  # noqa: E402  (same reading order as the tokenizer)

PER_CLASS = 2500
SEED = 20261202
_BLANK = re.compile(r"\n\s*\n")


def paragraphs(text: str, min_words: int) -> list[str]:
    out = []
    for block in _BLANK.split(text):
        block = " ".join(block.split())
        if len(block.split()) >= min_words:
            out.append(block)
    return out


def source_texts(sample: Path) -> dict[str, list[str]]:
    import io

    import pyarrow.parquet as pq
    import zstandard

    data = sample / "data"
    texts: dict[str, list[str]] = {"python-docs": [], "wikipedia": [], "debian-copyright": []}
    for path in sorted((data / "python-docs").glob("*.jsonl.zst")):
        with zstandard.ZstdDecompressor().stream_reader(path.open("rb")) as fh:
            texts["python-docs"].extend(_jsonl_texts(io.BufferedReader(fh)))
    for path in sorted((data / "wikipedia").glob("*.parquet")):
        texts["wikipedia"].extend(pq.read_table(path, columns=["text"]).column("text").to_pylist())
    for path in sorted((data / "debian-copyright").glob("*.txt")):
        texts["debian-copyright"].append(path.read_text(encoding="utf-8"))
    return texts


def by_hash(items: list[str], limit: int) -> list[str]:
    keyed = sorted({(hashlib.sha256(t.encode("utf-8")).hexdigest(), t) for t in items})
    return [t for _, t in keyed[:limit]]


def shuffled(paragraph: str) -> str:
    words = paragraph.split()
    rng = random.Random(int(hashlib.sha256(paragraph.encode("utf-8")).hexdigest()[:16], 16) ^ SEED)
    rng.shuffle(words)
    return " ".join(words)


def examples(sample: Path) -> tuple[list[str], list[str]]:
    texts = source_texts(sample)
    prose = [p for t in texts["python-docs"] + texts["wikipedia"] for p in paragraphs(t, 25)]
    boilerplate = [p for t in texts["debian-copyright"] for p in paragraphs(t, 10)]
    positive = by_hash(prose, PER_CLASS)
    salad = [shuffled(p) for p in by_hash(prose, PER_CLASS // 2)]
    negative = by_hash(boilerplate, PER_CLASS - len(salad)) + salad
    return positive, negative


def train(out: Path) -> str:
    positive, negative = examples(REPO / "sample")
    with tempfile.TemporaryDirectory() as tmp:
        for name, items in (("positive", positive), ("negative", negative)):
            with open(Path(tmp) / f"{name}.jsonl", "w", encoding="utf-8") as f:
                for text in items:
                    f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        subprocess.run([sys.executable, "-m", "beam_pipeline", "train-quality",
                        "--positive", str(Path(tmp) / "positive.jsonl"), "--negative", str(Path(tmp) / "negative.jsonl"),
                        "--out", str(out), "--seed", str(SEED % 1000), "--cutoff", "5000"], cwd=REPO, check=True)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", action="store_true", help="train twice and require identical bytes")
    args = parser.parse_args()
    out = REPO / "sample" / "models" / "quality.bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = train(out)
    print(f"sample/models/quality.bin sha256 {digest}")
    if args.verify:
        with tempfile.TemporaryDirectory() as tmp:
            again = train(Path(tmp) / "quality.bin")
        if again != digest:
            sys.exit(f"not reproducible: second training gave sha256 {again}")
        print("verified: a second training gave the same bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
