"""SentencePiece-style BPE through tiktoken: the ``tiktoken:metaspace`` engine.

Llama 2 or Mistral 7B's tokenizer as transformers converts it (``Prepend("▁")`` + ``Replace(" ", "▁")``,
no pre-tokenizer, byte fallback), run by tiktoken with ``▁`` written as a space, the model's characters as
the first ranks and each piece ranked by its first merge. :func:`metaspace_plan` checks that tiktoken
would merge as ``tokenizers`` does and computes the ranks; :class:`MetaspaceTiktokenEncoder` encodes with
them, and :func:`.token_encoder.load_encoder` probes it, with the plan's words, before using it
(docs/decisions.md, "tokenize engine").
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple, Sequence

import numpy as np

from beam_pipeline.transforms.tokenizers_encoder import IDS_DTYPE, Encoder, TokenizersEncoder, alternation, flatten
from beam_pipeline.transforms.word_cache_encoder import METASPACE, word_cache_mode


class MetaspacePlan(NamedTuple):
    """What :class:`MetaspaceTiktokenEncoder` needs: tiktoken's ranks (byte strings), the ids each rank
    stands for, the split regex, and the pieces the probe encodes as words."""

    ranks: dict[bytes, int]
    targets: list[tuple[int, ...]]
    pattern: str
    probe_words: list[str]


def _merge_pairs(model: dict) -> list[tuple[str, str]]:
    pairs = (merge.split(" ", 1) if isinstance(merge, str) else merge for merge in model.get("merges", []))
    return [(left, right) for left, right in pairs]


def _reachable(chars: set[str], merges: list[tuple[str, str]], vocab: dict[str, int]) -> set[str]:
    """The pieces the merges make from ``chars`` (and those)."""
    reachable, grown = set(chars), True
    while grown:
        grown = False
        for left, right in merges:
            piece = left + right
            if piece not in reachable and left in reachable and right in reachable and piece in vocab:
                reachable.add(piece)
                grown = True
    return reachable


def metaspace_plan(spec: dict) -> MetaspacePlan | str:
    """The plan of :class:`MetaspaceTiktokenEncoder` for a ``tokenizer.json`` (parsed), or why it would not
    encode it like ``tokenizers``."""
    if word_cache_mode(spec) != "metaspace":
        return "not a SentencePiece-style BPE (Prepend + Replace normalizer, no pre-tokenizer)"
    model = spec["model"]
    for option in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges"):
        if model.get(option):
            return f"BPE has {option}"
    vocab: dict[str, int] = model.get("vocab", {})
    byte_ids = [vocab.get(f"<0x{b:02X}>", -1) for b in range(256)]
    if not model.get("byte_fallback") or -1 in byte_ids:
        return "BPE has no byte fallback to every byte"
    if any(" " in token for token in vocab):
        return "a vocabulary entry holds a space (the stand-in for \u2581 here)"
    merges = _merge_pairs(model)
    chars = {token for token in vocab if len(token) == 1}
    reachable = _reachable(chars, merges, vocab)
    first: dict[str, int] = {}  # piece -> the rank of its first merge
    previous = ""
    for rank, (left, right) in enumerate(merges):
        if left in reachable and right in reachable:
            piece = left + right
            if piece != previous and piece in first:
                return "the merges of a piece are not consecutive"
            first.setdefault(piece, rank)
            previous = piece
    pairs = set(merges)
    twice: list[str] = []  # pieces of two splits or more
    for piece in first:
        splits = [(piece[:i], piece[i:]) for i in range(1, len(piece))]
        splits = [split for split in splits if split[0] in reachable and split[1] in reachable]
        if any(split not in pairs for split in splits):
            return "a piece splits into two pieces that are not a merge"
        if len(splits) > 1:
            twice.append(piece)
    ranks: dict[bytes, int] = {}
    targets: list[tuple[int, ...]] = []

    def add(key: bytes, ids: tuple[int, ...]) -> None:
        ranks[key] = len(targets)
        targets.append(ids)

    def as_bytes(data: bytes) -> tuple[int, ...]:
        return tuple(byte_ids[b] for b in data)

    def known(char: str) -> tuple[int, ...]:
        return (vocab[char],) if char in chars else as_bytes(char.encode())

    for byte in range(256):  # an ASCII character (the space: ▁), or a byte of a character not in the vocabulary
        add(bytes([byte]), known(METASPACE if byte == 32 else chr(byte)) if byte < 128 else as_bytes(bytes([byte])))
    prefixes = {char.encode()[:k] for char in chars - {METASPACE} for k in range(2, len(char.encode()) + 1)}
    for prefix in sorted(prefixes, key=lambda p: (len(p), p)):  # every known character is whole before a merge
        whole = prefix.decode(errors="ignore")
        add(prefix, known(whole) if whole.encode() == prefix else as_bytes(prefix))
    for piece in sorted(first, key=first.__getitem__):
        add(piece.replace(METASPACE, " ").encode(), (vocab[piece],))
    if len(ranks) != len(targets):
        return "two ranks have the same bytes"
    lone = not any("\n" in token for token in vocab if len(token) > 1)  # as the word cache's words
    pattern = r" *[^ \n]+| +|\n" if lone else r" *[^ ]+| +"
    overlaps = [p[: len(p) - k] + p for p in twice for k in range(1, len(p)) if p.endswith(p[:k])]
    return MetaspacePlan(ranks, targets, pattern, [*first, *(p + p for p in twice), *overlaps])


class MetaspaceTiktokenEncoder(Encoder):
    """A SentencePiece-style BPE (``Prepend("▁")`` + ``Replace(" ", "▁")``, no pre-tokenizer, byte fallback)
    run by tiktoken on the text with ``▁`` written as a space (one byte instead of three: the normalizer
    makes both ``▁``), split into the word cache's words (no merge crosses one, see
    :class:`WordCacheEncoder`). tiktoken's ranks: the 256 bytes, then the UTF-8 prefixes of the
    vocabulary's characters (so every known character is whole before any merge, as the model's initial
    symbols are), then each piece the merges make, in the order of its first merge. A rank stands for its
    piece's id or, for what is left of a character not in the vocabulary, its bytes' ``<0xXX>`` ids (the
    byte fallback). ``tokenizers`` merges the adjacent pair of lowest merge rank, tiktoken the pair whose
    concatenation has the lowest rank: the same pair when every split of a piece into two pieces is a
    merge and each piece's merges are consecutive in the list (:func:`metaspace_plan` checks both), up to
    which of two different splits of one piece present at once goes first (``tokenizers``: the
    lower-ranked split; tiktoken, like sentencepiece: the leftmost), which the probe tries on every such
    piece doubled and overlapping itself. Documents holding an added token's text are encoded whole by
    ``tokenizers``.
    """

    engine = "tiktoken:metaspace"

    def __init__(self, plan: MetaspacePlan, reference: TokenizersEncoder, added: Sequence[str]):
        import tiktoken

        encoding = tiktoken.Encoding(self.engine, pat_str=plan.pattern, mergeable_ranks=plan.ranks, special_tokens={})
        self._encode = functools.partial(encoding.encode_to_numpy, disallowed_special=())
        self._reference = reference
        self._added = alternation(added)
        self._lengths = np.fromiter(map(len, plan.targets), dtype=np.int64, count=len(plan.targets))
        self._starts = np.cumsum(self._lengths) - self._lengths
        self._ids = np.fromiter(itertools.chain.from_iterable(plan.targets), dtype=IDS_DTYPE)
        self._single = self._ids[self._starts]
        self._several = self._lengths > 1  # ranks standing for the bytes of a character (byte fallback)

    def _ranks(self, text: str) -> np.ndarray | None:
        """tiktoken's ranks for ``text``, or None when it holds an added token's text or a lone surrogate."""
        if self._added is not None and self._added.search(text):
            return None
        try:  # Prepend leaves an empty text empty
            return self._encode(" " + (text.replace(METASPACE, " ") if METASPACE in text else text) if text else "")
        except UnicodeEncodeError:  # tokenizers says what it says of it
            return None

    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        ranks = list(map(self._ranks, texts))
        whole = [i for i, r in enumerate(ranks) if r is None]
        empty = np.zeros(0, dtype=np.uint32)
        parts = [empty if r is None else r for r in ranks]
        per_text = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        every = np.concatenate(parts) if parts else empty
        if self._several[every].any():
            lengths = self._lengths[every]
            ends = np.cumsum(lengths)
            ids = self._ids[np.repeat(self._starts[every] - (ends - lengths), lengths) + np.arange(int(ends[-1]))]
            cumulative = np.concatenate([[0], ends])
            bounds = np.cumsum(per_text)
            counts = cumulative[bounds] - cumulative[bounds - per_text]
        else:
            ids, counts = self._single[every], per_text
        if whole:
            id_lists: list = np.split(ids, np.cumsum(counts)[:-1])
            for i, reference_ids in zip(whole, self._reference.id_lists([texts[i] for i in whole])):
                id_lists[i] = reference_ids
            ids, counts = flatten([list(x) for x in id_lists])
        engines = {self.engine: len(texts) - len(whole), self._reference.engine: len(whole)}
        return ids, counts, {name: n for name, n in engines.items() if n}
