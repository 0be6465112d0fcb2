"""The tokenize stage's encoders (beam_pipeline/transforms/token_encoder.py): the tiktoken fast path gives the ids
``tokenizers`` gives, and tokenizers it cannot encode the same way keep ``tokenizers``."""
import glob
import io
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard

from beam_pipeline.transforms.token_encoder import TokenizersEncoder, load_encoder, tiktoken_incompatibility

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "sample")
SAMPLE_TOKENIZER = os.path.join(SAMPLE, "tokenizer", "tokenizer.json")


def sample_texts() -> list[str]:
    """Every text of the bundled sample's JSONL and Parquet sources (docs, reStructuredText, Wikipedia)."""
    texts = []
    for path in sorted(glob.glob(os.path.join(SAMPLE, "data", "python-docs", "*.jsonl.zst"))):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        texts += [json.loads(line)["text"] for line in data.splitlines()]
    for path in sorted(glob.glob(os.path.join(SAMPLE, "data", "wikipedia", "*.parquet"))):
        texts += pq.read_table(path, columns=["text"]).column("text").to_pylist()
    return texts


EDGE_CASES = [
    "", " ", "\n\n\n", "  leading and trailing  ", "tabs\tand\r\nnewlines\n \n",
    "special <|endoftext|> inside<|pad|>and<|endoftext|><|endoftext|> twice", "<|endoftext",
    "I'm you're they've it'll he'd 'S 'T", "numbers 12345 3.14159 ١٢٣ ½", "emoji 🙂👍🏽 and CJK 漢字かなカナ 한국어",
    "Ελληνικά кириллица עברית العربية", "combining é e\u0301 \u200bzero\u2060width", "a" * 5000, "ab " * 2000,
]


def test_sample_tokenizer_takes_the_tiktoken_path_with_identical_ids():
    source = open(SAMPLE_TOKENIZER, encoding="utf-8").read()
    assert tiktoken_incompatibility(json.loads(source)) == ""
    fast = load_encoder(source)
    assert fast.engine == "tiktoken"
    from tokenizers import Tokenizer
    reference = TokenizersEncoder(Tokenizer.from_str(source))
    texts = sample_texts() + EDGE_CASES
    assert len(texts) > 500
    ids, counts = fast.encode_batch(texts)
    expected_ids, expected_counts = reference.encode_batch(texts)
    assert ids.dtype == np.dtype("<u4") and counts.sum() == ids.size
    assert np.array_equal(counts, expected_counts) and np.array_equal(ids, expected_ids)
    special = fast.encode_batch(["x<|endoftext|>y"])[0].tolist()
    assert 0 in special  # the added token is split out, as tokenizers does


def _variant(source: str, change) -> str:
    spec = json.loads(source)
    change(spec)
    return json.dumps(spec)


@pytest.mark.parametrize("change, reason", [
    (lambda s: s.__setitem__("normalizer", {"type": "NFC"}), "normalizer"),
    (lambda s: s["pre_tokenizer"].__setitem__("add_prefix_space", True), "pre-tokenizer"),
    (lambda s: s["model"].__setitem__("unk_token", "<|pad|>"), "unk_token"),
    (lambda s: s["added_tokens"][0].__setitem__("lstrip", True), "strips"),
    (lambda s: s["model"].__setitem__("merges", s["model"]["merges"][::-1]), "merge order"),
    (lambda s: s["model"].__setitem__("merges", s["model"]["merges"][:-1]), "result of a merge"),
])
def test_tokenizers_tiktoken_would_encode_differently_keep_tokenizers(change, reason):
    source = _variant(open(SAMPLE_TOKENIZER, encoding="utf-8").read(), change)
    assert reason in tiktoken_incompatibility(json.loads(source))
    encoder = load_encoder(source)
    assert encoder.engine == "tokenizers"
    from tokenizers import Tokenizer
    text = "The fallback encodes like tokenizers."
    assert encoder.encode_batch([text])[0].tolist() == Tokenizer.from_str(source).encode(
        text, add_special_tokens=False).ids
