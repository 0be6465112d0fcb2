"""Encoding text to token ids for the tokenize stage, a batch at a time, into flat numpy arrays.

The tokenizer is a Hugging Face ``tokenizer.json``; :func:`load_encoder` returns the
engine that encodes it, the first of these that applies and passes its load-time probe:

* **tiktoken** (``tiktoken.Encoding``, OpenAI's Rust byte-pair encoder) when the
  tokenizer is a byte-level BPE that tiktoken encodes to the same ids
  (:func:`.tiktoken_incompatibility` is empty): GPT-2's ``ByteLevel`` pre-tokenizer, or a
  ``Split`` regex before a ``ByteLevel`` without regex (the tiktoken-format
  vocabularies: Llama 3, Mistral's tekken); no normalizer, or NFC / NFKC, which is then
  applied by Python's ``unicodedata`` between the added tokens, as ``tokenizers`` does
  (engine ``tiktoken+nfkc``). ``tokenizers`` builds a full ``Encoding`` per document
  (token strings, offsets, masks) and runs its pre-tokenizer through Oniguruma, where
  tiktoken returns the ids only: 4-6x less CPU.
* **tiktoken:metaspace**: SentencePiece-style BPE as transformers converts it (Llama 2,
  Mistral 7B: the word cache's ``metaspace`` case below) with byte fallback, run by tiktoken
  with ``▁`` written as a space, the model's characters as the first merges and each piece
  ranked by its first merge (:class:`.MetaspaceTiktokenEncoder`; ~2x less CPU than the word
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

Each engine has its module: ``tiktoken_encoder.py``, ``metaspace_encoder.py``,
``word_cache_encoder.py``, and ``tokenizers_encoder.py`` (with the :class:`.Encoder` interface). This
module chooses among them, probes them and keeps the probe's verdict.

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

import functools
import hashlib
import inspect
import json
import logging
import os
import sys
import tempfile
import unicodedata
from typing import Any, Callable, Sequence

import numpy as np

from beam_pipeline.transforms import metaspace_encoder, tiktoken_encoder, tokenizers_encoder, word_cache_encoder
from beam_pipeline.transforms.metaspace_encoder import MetaspaceTiktokenEncoder, metaspace_plan
from beam_pipeline.transforms.tiktoken_encoder import make_tiktoken_encoder, tiktoken_plan
from beam_pipeline.transforms.tokenizers_encoder import Encoder, TokenizersEncoder
from beam_pipeline.transforms.word_cache_encoder import METASPACE, WordCacheEncoder, word_cache_mode

_LOGGER = logging.getLogger(__name__)
#: The modules of the engines :func:`load_encoder` chooses from, whose code a probe's verdict depends on.
ENGINE_MODULES = (tokenizers_encoder, tiktoken_encoder, word_cache_encoder, metaspace_encoder)


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
    """What a probe's verdict depends on: the tokenizer, the code of this module and of the engines'
    (:data:`ENGINE_MODULES`), the encoders' libraries and Python's Unicode tables. Any of them changing is a
    new key, so a new probe."""
    import tiktoken
    import tokenizers

    code = []
    for path in (__file__, *map(inspect.getfile, ENGINE_MODULES)):
        with open(path, "rb") as source:
            code.append(hashlib.sha256(source.read()).hexdigest())
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
    plan = tiktoken_plan(spec)
    if not isinstance(plan, str):
        candidates.append(lambda: make_tiktoken_encoder(spec, name, *plan, reference))
    extra: list[str] = []  # more probe texts
    metaspace = metaspace_plan(spec)
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
