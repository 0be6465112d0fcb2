"""Byte-level BPE through tiktoken: the ``tiktoken`` and ``tiktoken+nfc`` / ``tiktoken+nfkc`` engines.

:func:`tiktoken_incompatibility` says why tiktoken would not encode a ``tokenizer.json`` as
``tokenizers`` does ("" when it would: the conditions (a)-(d) of ``transforms/token_encoder.py``'s
docstring and docs/decisions.md, "tokenize engine"); :func:`make_tiktoken_encoder` builds the
:class:`TiktokenEncoder` that :func:`.token_encoder.load_encoder` then probes. With an NFC or NFKC
normalizer the text between added tokens is normalized by Python's ``unicodedata``, and texts holding
a character whose normalization ``tokenizers`` does otherwise (:func:`unicode_disagreements`) go to
``tokenizers`` whole.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any, Callable, Sequence

import numpy as np

from beam_pipeline.transforms.tokenizers_encoder import Encoder, TokenizersEncoder, alternation, flatten

#: The pre-tokenizer regex of GPT-2's byte-level BPE, as ``tokenizers``' ``ByteLevel(use_regex=True)`` has it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: Normalizers the tiktoken engine applies itself (Python's ``unicodedata``; the probe checks the tables).
UNICODE_FORMS = ("NFC", "NFKC")


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
                _normalized_encode, encoding.encode_ordinary, normalize, alternation(specials or {}), specials or {}
            )
            if reference is not None:
                risky = unicode_disagreements(form)
                self._risky = re.compile(f"[{re.escape(risky)}]") if risky else None

    def encode_batch_engines(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        risky = self._risky
        whole = [i for i, text in enumerate(texts) if risky.search(text)] if risky is not None else []
        if not whole or self._reference is None:
            return (*flatten(list(map(self._encode, texts))), {self.engine: len(texts)})
        id_lists = [[] if i in set(whole) else self._encode(text) for i, text in enumerate(texts)]
        for i, ids in zip(whole, self._reference.id_lists([texts[i] for i in whole])):
            id_lists[i] = ids
        return (*flatten(id_lists), {self.engine: len(texts) - len(whole), self._reference.engine: len(whole)})


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


def tiktoken_plan(spec: dict) -> tuple[str, str | None] | str:
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
    plan = tiktoken_plan(spec)
    return plan if isinstance(plan, str) else ""


def make_tiktoken_encoder(
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
