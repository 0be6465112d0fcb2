"""Encoding text to token ids for the tokenize stage, a batch at a time, into flat numpy arrays.

The tokenizer is a Hugging Face ``tokenizer.json``; :func:`load_encoder` returns the
engine that encodes it, the first of these that applies and passes its load-time probe:

* **tiktoken** (``tiktoken.Encoding``, OpenAI's Rust byte-pair encoder) when the
  tokenizer is a byte-level BPE that tiktoken encodes to the same ids
  (:func:`tiktoken_incompatibility` is empty): GPT-2's ``ByteLevel`` pre-tokenizer, or a
  ``Split`` regex before a ``ByteLevel`` without regex (the tiktoken-format
  vocabularies: Llama 3, Mistral's tekken); no normalizer, or NFC / NFKC, which is then
  applied by Python's ``unicodedata`` between the added tokens, as ``tokenizers`` does
  (engine ``tiktoken+nfkc``). ``tokenizers`` builds a full ``Encoding`` per document
  (token strings, offsets, masks) and runs its pre-tokenizer through Oniguruma, where
  tiktoken returns the ids only: 4-6x less CPU.
* **tiktoken:metaspace**: SentencePiece-style BPE as transformers converts it (Llama 2,
  Mistral 7B: the word cache's ``metaspace`` case below) with byte fallback, run by tiktoken
  with ``▁`` written as a space, the model's characters as the first merges and each piece
  ranked by its first merge (:class:`MetaspaceTiktokenEncoder`; ~2x less CPU than the word
  cache, whose Python work per word and ``tokenizers`` call per distinct word it removes).
* **word-cache**: tokenizers whose output is the concatenation of the outputs of chunks
  of the text: BERT-like per-character normalizers with a ``BertPreTokenizer`` (chunks
  between spaces, tabs and line breaks, and each ASCII punctuation character) or
  ``WhitespaceSplit``; SentencePiece-style BPE as transformers converts it
  (``Prepend("▁")`` + ``Replace(" ", "▁")``, no pre-tokenizer) when no vocabulary entry
  has ``▁`` after another character, so no token crosses a word (chunks: the words of
  the normalized text). Each distinct chunk is encoded once by ``tokenizers`` itself and
  its ids kept; a document is the concatenation of its chunks' ids. Documents holding an
  added token's text are encoded by ``tokenizers`` whole.
* **tokenizers** (``Tokenizer.encode_batch_fast``: ids only, no offsets) otherwise.

Truncation and padding of the ``tokenizer.json`` are switched off (documents are
tokenized whole). Every fast engine is compared with ``tokenizers`` on load (every
vocabulary entry, every code point of planes 0-2 in a few contexts, edge cases) and
not used on any difference. Which engine encoded how many documents is reported
by :meth:`Encoder.encode_batch_engines` (the stage's ``engine:<name>`` counts).

Why tiktoken gives the same ids (docs/decisions.md, "tokenize engine"). Byte-level
BPE as ``tokenizers`` runs it (Sennrich et al. 2016; GPT-2, Radford et al. 2019):
split out the added tokens, normalize the rest, split it with the pre-tokenizer's
regex, map each piece's bytes to single-byte tokens and apply the listed merges,
lowest merge index first, leftmost first among equals. tiktoken does the same split
and merges the adjacent pair whose concatenation has the lowest rank. With rank =
token id this is the same rule when (a) the id of each merge's result never
decreases with the merge index, (b) every multi-byte token is the result of a merge
and every byte is a token, (c) the added tokens are matched verbatim (no strip, no
word boundary, none a prefix of another, not normalized) and (d) a BPE without
dropout, unknown token, subword prefix/suffix or byte fallback. These are checked on
the tokenizer's JSON, then by the probe.
"""

from __future__ import annotations

import abc
import copy
import functools
import hashlib
import itertools
import json
import logging
import operator
import os
import re
import sys
import tempfile
import unicodedata
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

#: The pre-tokenizer regex of GPT-2's byte-level BPE, as ``tokenizers``' ``ByteLevel(use_regex=True)`` has it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
IDS_DTYPE = np.dtype("<u4")
#: Normalizers the tiktoken engine applies itself (Python's ``unicodedata``; the probe checks the tables).
UNICODE_FORMS = ("NFC", "NFKC")
#: Chunks longer than this are encoded but not kept by the word cache; the cache is emptied past CACHE_ENTRIES.
CACHE_CHUNK_CHARS, CACHE_ENTRIES = 64, 1 << 20
METASPACE = "\u2581"
_LOGGER = logging.getLogger(__name__)


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

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``texts`` (see the class)."""
        ids, counts, _ = self.encode_batch_engines(texts)
        return ids, counts

    @abc.abstractmethod
    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """``encode_batch`` and the number of texts each engine encoded."""


class TokenizersEncoder(Encoder):
    """``tokenizers`` itself: ids only (``encode_batch_fast``: no offsets), no truncation or padding."""

    engine = "tokenizers"

    def __init__(self, tokenizer: Any):
        self._tokenizer = _untruncated(tokenizer)
        self._encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)

    def id_lists(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._encode(list(texts), add_special_tokens=False)]

    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        return (*_flatten(self.id_lists(texts)), {self.engine: len(texts)})


def _untruncated(tokenizer: Any) -> Any:
    """``tokenizer`` without truncation or padding (a copy when it had them): documents are encoded whole."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class TiktokenEncoder(Encoder):
    """tiktoken; with ``form`` (NFC/NFKC), the text between added tokens is normalized first by Python's
    ``unicodedata``, and a text holding a character whose normalization ``tokenizers`` does otherwise
    (:func:`unicode_disagreements`: their Unicode versions differ) is encoded by ``reference``."""

    engine = "tiktoken"

    def __init__(
        self,
        encoding: Any,
        form: str | None = None,
        specials: dict[str, int] | None = None,
        reference: TokenizersEncoder | None = None,
    ):
        self._encode: Callable[[str], list[int]] = functools.partial(encoding.encode, allowed_special="all")
        self._risky: re.Pattern | None = None
        self._reference = reference
        if form:
            self.engine = f"tiktoken+{form.lower()}"
            normalize = functools.partial(unicodedata.normalize, form)  # type: ignore[arg-type]
            self._encode = functools.partial(
                _normalized_encode, encoding.encode_ordinary, normalize, _alternation(specials or {}), specials or {}
            )
            if reference is not None:
                risky = unicode_disagreements(form)
                self._risky = re.compile(f"[{re.escape(risky)}]") if risky else None

    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        risky = self._risky
        whole = [i for i, text in enumerate(texts) if risky.search(text)] if risky is not None else []
        if not whole or self._reference is None:
            return (*_flatten(list(map(self._encode, texts))), {self.engine: len(texts)})
        id_lists = [[] if i in set(whole) else self._encode(text) for i, text in enumerate(texts)]
        for i, ids in zip(whole, self._reference.id_lists([texts[i] for i in whole])):
            id_lists[i] = ids
        return (*_flatten(id_lists), {self.engine: len(texts) - len(whole), self._reference.engine: len(whole)})


@functools.cache
def unicode_disagreements(form: str) -> str:
    """The characters whose ``form`` normalization ``tokenizers`` and Python's ``unicodedata`` may do
    differently (their Unicode tables are of different versions): those a single character's NFD or
    ``form`` differs for (and the characters of Python's decomposition of them), and the combining marks
    that order or compose differently next to a letter and another mark."""
    from tokenizers import normalizers

    ours = functools.partial(unicodedata.normalize, form)  # type: ignore[arg-type]
    theirs = getattr(normalizers, form)().normalize_str
    points = [chr(c) for c in range(0x30000) if not 0xD800 <= c < 0xE000 and c != 0x0A]  # "\n" separates
    risky: set[str] = set()
    for name, python in ((form, ours), ("NFD", functools.partial(unicodedata.normalize, "NFD"))):
        rust = getattr(normalizers, name)().normalize_str
        joined = "\n".join(points)
        for point, a, b in zip(points, python(joined).split("\n"), rust(joined).split("\n")):
            if a != b:
                risky.update(point + unicodedata.normalize("NFD", point))
    marks = [c for c in points if unicodedata.combining(c)]
    others = "\u0334\u0316\u0301\u0345"  # combining classes 1, 220, 230, 240
    probe = "\n".join(f"a{m}{c}\na{c}{m}" for c in marks for m in others)
    pairs = zip(ours(probe).split("\n"), theirs(probe).split("\n"))
    for i, (a, b) in enumerate(pairs):
        if a != b:
            risky.add(marks[i // (2 * len(others))])
    return "".join(sorted(risky))


def _alternation(words) -> re.Pattern | None:
    """A regex matching any of ``words`` (longest first), or None when there are none."""
    words = sorted(words, key=lambda w: (-len(w), w))
    return re.compile("|".join(map(re.escape, words))) if words else None


def _normalized_encode(encode_ordinary, normalize, specials_re, specials: dict[str, int], text: str) -> list[int]:
    """Split out the added tokens on the raw text, normalize and encode what is between them."""
    if specials_re is None or specials_re.search(text) is None:
        return encode_ordinary(normalize(text))
    ids: list[int] = []
    position = 0
    for match in specials_re.finditer(text):
        if match.start() > position:
            ids += encode_ordinary(normalize(text[position : match.start()]))
        ids.append(specials[match.group()])
        position = match.end()
    if position < len(text):
        ids += encode_ordinary(normalize(text[position:]))
    return ids


def _flatten(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=IDS_DTYPE, count=int(counts.sum()))
    return ids, counts


def _tiktoken_plan(spec: dict) -> tuple[str, str | None] | str:
    """(pre-tokenizer regex, Unicode form or None) when tiktoken encodes this ``tokenizer.json`` (parsed)
    like ``tokenizers``; else the reason it would not."""
    normalizer = spec.get("normalizer")
    form = None
    if normalizer is not None:
        if normalizer.get("type") not in UNICODE_FORMS:
            return "has a normalizer other than NFC or NFKC"
        form = normalizer["type"]
    pattern = _byte_level_pattern(spec.get("pre_tokenizer") or {})
    if not pattern:
        return "pre-tokenizer is not ByteLevel(add_prefix_space=False, use_regex=True) or Split(regex) + ByteLevel"
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        pass  # switched off: documents are tokenized whole
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
    if form and any(token.get("normalized") for token in added):
        return "an added token is matched after normalization"
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
        if result is None or result < last:
            return "merge results are not in the vocabulary in merge order"
        last = result
        made.add(left + right)
    if any(len(token) > 1 and token not in made for token in vocab):
        return "a vocabulary entry is not the result of a merge"
    return pattern, form


def _byte_level_pattern(pre: dict) -> str:
    """The regex tiktoken splits with for this pre-tokenizer, or "" when it is not one tiktoken can run."""
    if pre.get("type") == "ByteLevel":
        if pre.get("add_prefix_space") or not pre.get("use_regex", True):
            return ""
        return GPT2_PATTERN
    if pre.get("type") != "Sequence" or len(pre.get("pretokenizers") or []) != 2:
        return ""
    split, byte_level = pre["pretokenizers"]
    if byte_level.get("type") != "ByteLevel" or byte_level.get("add_prefix_space") or byte_level.get("use_regex"):
        return ""
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return ""
    return (split.get("pattern") or {}).get("Regex", "")


def tiktoken_incompatibility(spec: dict) -> str:
    """Why tiktoken would not encode this ``tokenizer.json`` (parsed) like ``tokenizers``; "" when it would."""
    plan = _tiktoken_plan(spec)
    return plan if isinstance(plan, str) else ""


def _tiktoken_encoder(
    spec: dict, name: str, pattern: str, form: str | None, reference: TokenizersEncoder
) -> TiktokenEncoder:
    import tiktoken

    byte_of = _byte_of_char()
    specials = {token["content"]: token["id"] for token in spec.get("added_tokens") or []}
    ranks = {
        bytes(byte_of[ch] for ch in token): i for token, i in spec["model"]["vocab"].items() if token not in specials
    }
    encoding = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    return TiktokenEncoder(encoding, form, specials, reference)


# --- the word cache ---------------------------------------------------------------------------------------

#: Normalizers that act on each character alone, never across a space, tab or line break (for ``whitespace``).
_CHAR_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"})
_WHITESPACE_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "WhitespaceSplit", "Whitespace"})
#: Chunks: what the whitespace pre-tokenizers keep between spaces, tabs and line breaks (which they drop and
#: split at); for ``BertPreTokenizer`` also each ASCII punctuation character, which it isolates.
_WHITESPACE_CHUNKS = re.compile(r"[^ \t\n\r]+")
_BERT_CHUNKS = re.compile(r"[^ \t\n\r!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")


def word_cache_mode(spec: dict) -> str:
    """``whitespace`` or ``metaspace`` when the ids of a text are the concatenation of the ids of its chunks
    (see :class:`WordCacheEncoder`), "" otherwise."""
    model = spec.get("model") or {}
    if model.get("type") not in ("BPE", "WordPiece") or model.get("dropout"):
        return ""
    if any(
        token.get("lstrip") or token.get("rstrip") or token.get("single_word")
        for token in spec.get("added_tokens") or []
    ):
        return ""
    normalizer = spec.get("normalizer")
    steps = (
        normalizer.get("normalizers")
        if normalizer and normalizer.get("type") == "Sequence"
        else [normalizer]
        if normalizer
        else []
    )
    pre = spec.get("pre_tokenizer")
    if (
        pre
        and pre.get("type") in _WHITESPACE_PRE_TOKENIZERS
        and all(step.get("type") in _CHAR_NORMALIZERS for step in steps)
    ):
        return "bert" if pre["type"] == "BertPreTokenizer" else "whitespace"
    legacy_sentencepiece = [
        {"type": "Prepend", "prepend": METASPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE},
    ]
    if pre is None and steps == legacy_sentencepiece and model.get("type") == "BPE":
        crossing = re.compile(f"[^{METASPACE}]{METASPACE}")
        if not any(crossing.search(token) for token in model.get("vocab", {})):
            return "metaspace"
    return ""


class WordCacheEncoder(Encoder):
    """The ids of each distinct chunk of text, computed once by ``tokenizers`` and kept.

    ``whitespace``: chunks are the text split at runs of spaces, tabs and line breaks, which the
    normalizer maps to a space and the pre-tokenizer drops and splits at; each character is
    normalized alone, so a text's ids are its chunks' ids one after another. ``bert``: the same, and
    each ASCII punctuation character is a chunk of its own (``BertPreTokenizer`` isolates it).
    ``metaspace`` (SentencePiece-style BPE, no pre-tokenizer): the normalized text is ``▁`` + the text
    with spaces as ``▁`` (computed here: both steps are literal); no vocabulary entry has ``▁`` after
    another character, so no merge crosses the start of a word (a run of ``▁`` and what follows it up
    to the next ``▁``), and when no entry of two characters or more holds a line break, none crosses
    one either: each word, and each line break, encodes as it does alone, through the BPE model.
    """

    def __init__(self, reference: TokenizersEncoder, mode: str, added: Sequence[str]):
        self.engine = f"word-cache:{mode}"
        self._reference = reference
        self._tokenizer = reference._tokenizer
        self._metaspace = mode == "metaspace"
        chunks = {"whitespace": _WHITESPACE_CHUNKS.findall, "bert": _BERT_CHUNKS.findall}
        self._split = chunks.get(mode, self._words)
        self._added = _alternation(added)  # texts holding an added token's text are encoded whole
        self._cache: dict[str, bytes] = {}  # chunk -> its ids as IDS_DTYPE bytes
        if self._metaspace:
            # the words of the normalized text: a run of ▁ and what follows up to the next ▁ or line break;
            # a line break alone when no token of two characters or more holds one (byte fallback encodes it)
            vocab = self._tokenizer.get_vocab(with_added_tokens=False)
            lone = "\n" if not any("\n" in token for token in vocab if len(token) > 1) else ""
            self._word = re.compile(f"{METASPACE}*[^{METASPACE}{lone}]+|{METASPACE}+" + (f"|{lone}" if lone else ""))
            self._model_only = copy.deepcopy(self._tokenizer)  # encodes a word as it is: no normalizer
            self._model_only.normalizer = None

    def _words(self, text: str) -> list[str]:
        """The words of ``text`` normalized as the legacy SentencePiece normalizer does."""
        return self._word.findall(METASPACE + text.replace(" ", METASPACE))

    def clear_cache(self) -> None:
        self._cache.clear()

    def _fill(self, chunks: list[str]) -> dict[str, bytes]:
        """The ids of ``chunks`` (distinct), each as it encodes alone. Metaspace: each word through the model.
        Otherwise the chunks are encoded as one text, joined by line breaks (which split them the same way),
        each token going to the chunk where it starts."""
        found: dict[str, bytes] = {}  # ids as IDS_DTYPE bytes
        if self._metaspace:  # each word through the model alone
            encodings = self._model_only.encode_batch_fast(chunks, add_special_tokens=False)
            as_bytes = functools.partial(np.asarray, dtype=IDS_DTYPE)
            found.update(zip(chunks, (as_bytes(encoding.ids).tobytes() for encoding in encodings)))
            return found
        if not chunks:
            return found
        encoding = self._tokenizer.encode("\n".join(chunks), add_special_tokens=False)
        lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)) + 1
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        token_starts = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
        owner = np.searchsorted(starts, token_starts, side="right") - 1
        bounds = np.searchsorted(owner, np.arange(len(chunks) + 1)).tolist()
        data = np.asarray(encoding.ids, dtype=IDS_DTYPE).tobytes()
        size = IDS_DTYPE.itemsize
        found.update((chunk, data[bounds[i] * size : bounds[i + 1] * size]) for i, chunk in enumerate(chunks))
        return found

    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        cache, split, added = self._cache, self._split, self._added
        whole = [i for i, text in enumerate(texts) if added and added.search(text)]
        chunked = [split(text) if text else [] for text in texts]
        for i in whole:
            chunked[i] = []
        every = list(itertools.chain.from_iterable(chunked))
        values: list = list(map(cache.get, every))  # None where not cached (b"" for a chunk of no ids: looked up again)
        unknown = list(itertools.compress(range(len(every)), map(operator.not_, values)))
        if unknown:
            fresh = self._fill(list({every[i] for i in unknown}))
            for i in unknown:
                values[i] = fresh[every[i]]
            if len(cache) + len(fresh) > CACHE_ENTRIES:
                cache.clear()
            cache.update((chunk, ids) for chunk, ids in fresh.items() if len(chunk) <= CACHE_CHUNK_CHARS)
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values)) // IDS_DTYPE.itemsize
        ids = np.frombuffer(b"".join(values), dtype=IDS_DTYPE)
        per_text = np.fromiter(map(len, chunked), dtype=np.int64, count=len(chunked))
        ends = np.cumsum(per_text)
        cumulative = np.concatenate([[0], np.cumsum(lengths)])
        counts = cumulative[ends] - cumulative[ends - per_text]
        engines = {self.engine: len(texts) - len(whole), self._reference.engine: len(whole)}
        if whole:
            id_lists: list = np.split(ids, np.cumsum(counts)[:-1]) if len(texts) else []
            for i, reference_ids in zip(whole, self._reference.id_lists([texts[i] for i in whole])):
                id_lists[i] = reference_ids
            ids, counts = _flatten([list(x) for x in id_lists])
        return ids, counts, {name: n for name, n in engines.items() if n}


# --- SentencePiece-style BPE through tiktoken ----------------------------------------------------------------


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


def _metaspace_plan(spec: dict) -> MetaspacePlan | str:
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
    merge and each piece's merges are consecutive in the list (:func:`_metaspace_plan` checks both), up to
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
        self._added = _alternation(added)
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
            ids, counts = _flatten([list(x) for x in id_lists])
        engines = {self.engine: len(texts) - len(whole), self._reference.engine: len(whole)}
        return ids, counts, {name: n for name, n in engines.items() if n}


# --- choosing and checking ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def code_point_probe() -> str:
    """Every code point of planes 0-2 but surrogates, after a letter and before a digit, then alone."""
    points = [chr(c) for c in range(0x30000) if not 0xD800 <= c < 0xE000]
    return "".join(f"x{c}1{c} " for c in points)


#: Texts every fast engine must encode like ``tokenizers`` (besides the vocabulary and the code points).
EDGE_PROBES = [
    "",
    " ",
    "  ",
    "a ",
    " a",
    "a  b",
    "\n\n\n",
    "  leading and trailing  ",
    "tabs\tand\r\nnewlines\n \n",
    "I'm you're they've it'll he'd 'S 'T",
    "numbers 12345 3.14159 ١٢٣ ½ ² ①",
    "emoji 🙂👍🏽 👨‍👩‍👧 and CJK 漢字かなカナ 한국어",
    "Ελληνικά кириллица עברית العربية हिन्दी ไทย",
    "combining é e\u0301 a\u0316\u0301 \u200bzero\u2060width",
    "compatibility ﬁ ﬀ ｆｕｌｌ ｗｉｄｔｈ ㌀ ℌ ™ Ⅻ ﹤ ﹥ ＜＞ Å Å ẞ İ ǅ",
    "a" * 3000,
    "ab " * 1000,
    "\u2581 \u2581x",
    "\x00\x01\x1f\x7f\x85\xa0\u2028\ufeff\ufffd control",
    "x" * 150 + " " + "é" * 120,
]


def _probe_texts(tokenizer: Any, added: Sequence[str]) -> list[str]:
    vocab = [tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.get_vocab_size())]
    joined = [" ".join(vocab), "\n".join(vocab), "".join(vocab[:20000])]
    around = [f"a{token}b {token} x{token}" for token in added[:64]]
    return EDGE_PROBES + joined + around + [code_point_probe()]


def _same_ids(fast: Encoder, reference: TokenizersEncoder, texts: list[str]) -> bool:
    ours, theirs = fast.encode_batch(texts), reference.encode_batch(texts)
    return all(np.array_equal(a, b) for a, b in zip(ours, theirs))


def probe_verdicts_folder() -> str:
    """Where the tokenize stage keeps its probes' verdicts on this machine: ``$BEAM_PIPELINE_CACHE`` (or
    ``~/.cache/beam_pipeline``) ``/encoder_probes``."""
    cache = os.environ.get("BEAM_PIPELINE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "beam_pipeline")
    return os.path.join(cache, "encoder_probes")


def probe_verdict_key(tokenizer_json: str) -> str:
    """What a probe's verdict depends on: the tokenizer, this module's code, the encoders' libraries and
    Python's Unicode tables. Any of them changing is a new key, so a new probe."""
    import tiktoken
    import tokenizers

    with open(__file__, "rb") as source:
        code = hashlib.sha256(source.read()).hexdigest()
    facts = [
        hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
        code,
        tokenizers.__version__,
        tiktoken.__version__,
        np.__version__,
        unicodedata.unidata_version,
        sys.version.split()[0],
    ]
    return hashlib.sha256(json.dumps(facts).encode("utf-8")).hexdigest()


def _read_verdict(folder: str, key: str) -> dict | None:
    try:
        with open(os.path.join(folder, f"{key}.json"), encoding="utf-8") as f:
            verdict = json.load(f)
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) and "candidate" in verdict else None


def _write_verdict(folder: str, key: str, verdict: dict) -> None:
    """Written under a temporary name, then renamed: workers of one machine never read half a verdict. A
    folder that cannot be written (a read-only home) only means the next load probes again."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(verdict, f)
        os.replace(tmp, os.path.join(folder, f"{key}.json"))
    except OSError as error:
        _LOGGER.info("the tokenizer probe's verdict was not kept in %s: %s", folder, error)


def load_encoder(tokenizer_json: str, name: str = "tokenizer", verdicts: str | None = None) -> Encoder:
    """The fastest engine that encodes ``tokenizer_json`` (the file's text) to the ids ``tokenizers`` gives.

    ``verdicts``: a folder (:func:`probe_verdicts_folder`) keeping which engine passed the probe, by
    :func:`probe_verdict_key`. The probe encodes every code point of planes 0-2 and the vocabulary with
    both engines, ~2 s of CPU, paid by every worker process that loads the tokenizer; with the folder, once
    per machine. A kept verdict picks the same engine the probe would: the key holds everything the
    probe's outcome depends on.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    reference = TokenizersEncoder(tokenizer)
    spec = json.loads(tokenizer_json)
    added = [token["content"] for token in spec.get("added_tokens") or []]
    candidates: list[Callable[[], Encoder]] = []
    plan = _tiktoken_plan(spec)
    if not isinstance(plan, str):
        candidates.append(lambda: _tiktoken_encoder(spec, name, *plan, reference))
    extra: list[str] = []  # more probe texts
    metaspace = _metaspace_plan(spec)
    if not isinstance(metaspace, str):
        candidates.append(lambda: MetaspaceTiktokenEncoder(metaspace, reference, added))
        words = [word.replace(METASPACE, " ") for word in metaspace.probe_words]  # each a word of its own line
        extra = ["\n".join(words[i : i + 2000]) for i in range(0, len(words), 2000)]
    mode = word_cache_mode(spec)
    if mode:
        candidates.append(lambda: WordCacheEncoder(reference, mode, added))
    if not candidates:
        return reference
    key = probe_verdict_key(tokenizer_json) if verdicts else ""
    kept = _read_verdict(verdicts, key) if verdicts else None
    if kept is not None:
        if kept["candidate"] is None:
            return reference
        if isinstance(kept["candidate"], int) and 0 <= kept["candidate"] < len(candidates):
            fast = candidates[kept["candidate"]]()
            if fast.engine == kept.get("engine"):
                return fast
    chosen: Encoder = reference
    found = None  # the index of the candidate that passed
    probe = _probe_texts(reference._tokenizer, added) + extra
    for index, make in enumerate(candidates):
        fast = make()
        if _same_ids(fast, reference, probe):
            if isinstance(fast, WordCacheEncoder):
                fast.clear_cache()  # of the probe's chunks
            chosen, found = fast, index
            break
    if verdicts:
        _write_verdict(verdicts, key, {"candidate": found, "engine": chosen.engine, "tokenizer": name})
    return chosen
