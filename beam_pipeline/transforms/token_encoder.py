"""Encoding text to token ids for the tokenize stage, a batch at a time, into flat numpy arrays.

The tokenizer is a Hugging Face ``tokenizer.json``; :func:`load_encoder` returns the
engine that encodes it:

* **tiktoken** (``tiktoken.Encoding``, OpenAI's Rust byte-pair encoder) when the
  tokenizer is a plain byte-level BPE that tiktoken encodes to the same ids
  (:func:`tiktoken_incompatibility` is empty). On real text it takes about a sixth
  of the CPU of ``tokenizers`` for the same ids (bench/results/side-by-side-*.md):
  ``tokenizers`` builds a full ``Encoding`` per document (token strings, offsets,
  masks) and runs its pre-tokenizer through Oniguruma, where tiktoken returns the ids
  only.
* **tokenizers** (``Tokenizer.encode_batch``) for every other tokenizer.

Why the two give the same ids (docs/decisions.md, "tokenize engine"). Byte-level
BPE as ``tokenizers`` runs it (Sennrich et al. 2016; GPT-2, Radford et al. 2019):
split out the added tokens, split the rest with the GPT-2 regex, map each piece's
bytes to single-byte tokens and apply the listed merges, lowest merge index first,
leftmost first among equals. tiktoken does the same split and merges the adjacent
pair whose concatenation has the lowest rank. With rank = token id this is the
same rule when (a) the id of each merge's result grows with the merge index,
(b) every multi-byte token is the result of exactly one merge and every byte is a
token, (c) the added tokens are matched verbatim (no strip, no word boundary,
none a prefix of another) and (d) no normalizer, a ``ByteLevel`` pre-tokenizer
with the GPT-2 regex and no prefix space, and a BPE without dropout, unknown
token, subword prefix/suffix or byte fallback. These are checked on the
tokenizer's JSON; as a last guard every vocabulary entry is encoded by both on
load, and any difference selects ``tokenizers``.
"""

from __future__ import annotations

import abc
import functools
import itertools
import json
from typing import Any, Sequence

import numpy as np

#: The pre-tokenizer regex of GPT-2's byte-level BPE, as ``tokenizers``' ``ByteLevel(use_regex=True)`` has it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
IDS_DTYPE = np.dtype("<u4")


def _byte_of_char() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (``bytes_to_unicode``), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class Encoder(abc.ABC):
    """``encode_batch(texts) -> (ids, counts)``: the ids of every text, concatenated (little-endian uint32),
    and the number of ids of each text."""

    engine = ""

    @abc.abstractmethod
    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``texts`` (see the class)."""


class TokenizersEncoder(Encoder):
    engine = "tokenizers"

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return _flatten([encoding.ids for encoding in encodings])


class TiktokenEncoder(Encoder):
    engine = "tiktoken"

    def __init__(self, encoding: Any):
        self._encode = functools.partial(encoding.encode, allowed_special="all")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return _flatten(list(map(self._encode, texts)))


def _flatten(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=IDS_DTYPE, count=int(counts.sum()))
    return ids, counts


def tiktoken_incompatibility(spec: dict) -> str:
    """Why tiktoken would not encode this ``tokenizer.json`` (parsed) like ``tokenizers``; "" when it would."""
    if spec.get("normalizer") is not None:
        return "has a normalizer"
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return "pre-tokenizer is not ByteLevel(add_prefix_space=False, use_regex=True)"
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return "truncates or pads"
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return "model is not BPE"
    for option in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(option):
            return f"BPE has {option}"
    if model.get("byte_fallback") or model.get("ignore_merges"):
        return "BPE has byte_fallback or ignore_merges"
    added = spec.get("added_tokens") or []
    contents = [token["content"] for token in added]
    if any(token.get("lstrip") or token.get("rstrip") or token.get("single_word") for token in added):
        return "an added token strips or matches whole words"
    if any(a != b and b.startswith(a) for a in contents for b in contents):
        return "an added token is a prefix of another"
    byte_of = _byte_of_char()
    vocab = {token: i for token, i in model.get("vocab", {}).items() if token not in contents}
    if any(ch not in byte_of for token in vocab for ch in token):
        return "a vocabulary entry is not byte-level"
    if not all(ch in vocab for ch in byte_of):
        return "not every byte is in the vocabulary"
    last, made = -1, set()
    for merge in model.get("merges", []):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        result = vocab.get(left + right)
        if result is None or result <= last:
            return "merge results are not in the vocabulary in merge order"
        last = result
        made.add(left + right)
    if any(len(token) > 1 and token not in made for token in vocab):
        return "a vocabulary entry is not the result of a merge"
    return ""


def _tiktoken_encoding(spec: dict, name: str) -> Any:
    import tiktoken

    byte_of = _byte_of_char()
    specials = {token["content"]: token["id"] for token in spec.get("added_tokens") or []}
    ranks = {
        bytes(byte_of[ch] for ch in token): i for token, i in spec["model"]["vocab"].items() if token not in specials
    }
    return tiktoken.Encoding(name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def load_encoder(tokenizer_json: str, name: str = "tokenizer") -> Encoder:
    """The fastest engine that encodes ``tokenizer_json`` (the file's text) to the ids ``tokenizers`` gives."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    reference = TokenizersEncoder(tokenizer)
    spec = json.loads(tokenizer_json)
    if tiktoken_incompatibility(spec):
        return reference
    fast = TiktokenEncoder(_tiktoken_encoding(spec, name))
    probe = [tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.get_vocab_size())]
    probe += [" ".join(probe), "\n".join(probe)]
    for ours, theirs in zip(fast.encode_batch(probe), reference.encode_batch(probe)):
        if not np.array_equal(ours, theirs):
            return reference
    return fast
