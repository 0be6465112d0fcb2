"""The interface of the tokenize stage's encoders and the engine every other one is checked against.

:class:`Encoder` is what :func:`.token_encoder.load_encoder` returns and the tokenize stage
(``transforms/tokenize_shard.py``) calls: ``encode_batch(texts) -> (ids, counts)``, flat numpy arrays.
:class:`TokenizersEncoder` is ``tokenizers`` itself (``encode_batch_fast``, ids only), the engine used
when no fast one applies, the reference each fast engine is probed against on load, and the one they
hand the texts they cannot encode (those holding an added token's text, or a character whose
normalization Python's Unicode tables do otherwise). The fast engines (``tiktoken_encoder.py``,
``word_cache_encoder.py``, ``metaspace_encoder.py``) build their output with :func:`flatten` and
find added tokens with :func:`alternation`.
"""

from __future__ import annotations

import abc
import copy
import itertools
import re
from typing import Any, Sequence

import numpy as np

IDS_DTYPE = np.dtype("<u4")


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
        return (*flatten(self.id_lists(texts)), {self.engine: len(texts)})


def _untruncated(tokenizer: Any) -> Any:
    """``tokenizer`` without truncation or padding (a copy when it had them): documents are encoded whole."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def alternation(words) -> re.Pattern | None:
    """A regex matching any of ``words`` (longest first), or None when there are none."""
    words = sorted(words, key=lambda w: (-len(w), w))
    return re.compile("|".join(map(re.escape, words))) if words else None


def flatten(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=IDS_DTYPE, count=int(counts.sum()))
    return ids, counts
