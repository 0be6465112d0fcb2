"""The word cache: the ``word-cache:whitespace``, ``word-cache:bert`` and ``word-cache:metaspace`` engines.

For tokenizers whose ids of a text are the concatenation of the ids of its chunks (BERT-like
per-character normalizers with a whitespace or BERT pre-tokenizer; SentencePiece-style BPE as
transformers converts it, when no token crosses a word): :func:`word_cache_mode` tells which, and
:class:`WordCacheEncoder` encodes each distinct chunk once through ``tokenizers`` and keeps its ids.
:func:`.token_encoder.load_encoder` probes it like the other fast engines; the SentencePiece-style BPE
through tiktoken (``metaspace_encoder.py``) splits into the same words.
"""

from __future__ import annotations

import copy
import functools
import itertools
import operator
import re
from typing import Sequence

import numpy as np

from beam_pipeline.transforms.tokenizers_encoder import IDS_DTYPE, Encoder, TokenizersEncoder, alternation, flatten

#: Chunks longer than this are encoded but not kept by the word cache; the cache is emptied past CACHE_ENTRIES.
CACHE_CHUNK_CHARS, CACHE_ENTRIES = 64, 1 << 20
METASPACE = "\u2581"

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
        self._added = alternation(added)  # texts holding an added token's text are encoded whole
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
            ids, counts = flatten([list(x) for x in id_lists])
        return ids, counts, {name: n for name, n in engines.items() if n}
