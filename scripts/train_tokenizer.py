#!/usr/bin/env python3
"""Train the sample byte-level BPE tokenizer from the bundled sample corpus.

Reads the text of all four sample sources written by ``scripts/build_sample.py``
(python-docs, python-docs-mirror, wikipedia, debian-copyright), in a fixed
order, and trains a byte-level BPE with Hugging Face ``tokenizers``:

* ByteLevel pre-tokenizer (GPT-2 regex, no prefix space) and ByteLevel decoder;
* all 256 byte symbols in the initial alphabet, so any input is encodable;
* vocab size 8192, min frequency 2;
* special tokens ``<|endoftext|>`` (id 0) and ``<|pad|>`` (id 1).

The result, ``sample/tokenizer/tokenizer.json``, is byte-identical on rerun.
``--verify`` trains a second time in a fresh process (another hash seed) and
fails unless both files have the same sha256.

Usage:  .venv/bin/python scripts/train_tokenizer.py [--sample-dir sample] [--verify]
"""
from __future__ import annotations

import os

# The BPE trainer counts words and pairs on a rayon thread pool.  With
# tokenizers 0.23.3 the result was byte-identical with 1, 2, 8 and 16 threads
# and different PYTHONHASHSEEDs (the trainer breaks count ties by the pair
# itself), but the pool is pinned to one thread anyway so the output can never
# depend on the core count or on scheduling; it costs ~nothing here (~10 s).
# Must be set before tokenizers is loaded.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import gzip  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Iterator  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

VOCAB_SIZE = 8192
MIN_FREQUENCY = 2
SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]  # ids 0 and 1


def _jsonl_texts(lines: Iterator[bytes]) -> Iterator[str]:
    for line in lines:
        if line.strip():
            yield json.loads(line)["text"]


def iter_texts(sample_dir: Path) -> Iterator[str]:
    """Yield every document text of the sample, in a fixed order."""
    import pyarrow.parquet as pq
    import zstandard

    data = sample_dir / "data"
    parts = sorted((data / "python-docs").glob("*.jsonl.zst"))
    for path in parts:
        with zstandard.ZstdDecompressor().stream_reader(path.open("rb")) as fh:
            yield from _jsonl_texts(io.BufferedReader(fh))
    for path in sorted((data / "python-docs-mirror").glob("*.jsonl.gz")):
        with gzip.open(path, "rb") as fh:
            yield from _jsonl_texts(fh)
    for path in sorted((data / "wikipedia").glob("*.parquet")):
        yield from pq.read_table(path, columns=["text"]).column("text").to_pylist()
    for path in sorted((data / "debian-copyright").glob("*.txt")):
        yield path.read_text(encoding="utf-8")


def train(sample_dir: Path, output: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = list(iter_texts(sample_dir))
    if not texts:
        sys.exit(f"train_tokenizer: no documents under {sample_dir / 'data'}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, tok in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(tok) != i:
            sys.exit(f"train_tokenizer: {tok} got id {tokenizer.token_to_id(tok)}, expected {i}")
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f"train_tokenizer: vocab size {tokenizer.get_vocab_size()} != {VOCAB_SIZE} "
                 "(corpus too small for the requested size?)")
    probe = "def f(x):\n    return x  # naïve ✓ \U0001F600\n"
    if tokenizer.decode(tokenizer.encode(probe).ids) != probe:
        sys.exit("train_tokenizer: encode/decode round trip failed")
    output.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(output), pretty=False)  # compact: ~230 KB vs ~550 KB
    digest = hashlib.sha256(output.read_bytes()).hexdigest()
    print(f"[train_tokenizer] {len(texts)} documents -> {output} "
          f"(vocab {tokenizer.get_vocab_size()}, sha256 {digest})", file=sys.stderr)
    return digest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sample-dir", type=Path, default=REPO / "sample")
    ap.add_argument("--output", type=Path, default=None,
                    help="default: <sample-dir>/tokenizer/tokenizer.json")
    ap.add_argument("--verify", action="store_true",
                    help="train again in a fresh process and require an identical file")
    args = ap.parse_args(argv)
    output = args.output or args.sample_dir / "tokenizer" / "tokenizer.json"

    digest = train(args.sample_dir, output)
    if args.verify:
        with tempfile.TemporaryDirectory() as tmp:
            again = Path(tmp) / "tokenizer.json"
            env = {**os.environ, "PYTHONHASHSEED": "12345"}
            subprocess.run([sys.executable, __file__, "--sample-dir", str(args.sample_dir),
                            "--output", str(again)], check=True, env=env)
            digest2 = hashlib.sha256(again.read_bytes()).hexdigest()
        if digest != digest2:
            sys.exit(f"train_tokenizer: NOT deterministic: {digest} vs {digest2}")
        print("[train_tokenizer] verify: second training is byte-identical", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
