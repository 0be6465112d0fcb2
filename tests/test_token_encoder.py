"""The tokenize stage's encoders (beam_pipeline/transforms/token_encoder.py and its engine modules): the
tiktoken fast path gives the ids ``tokenizers`` gives, and tokenizers it cannot encode the same way keep
``tokenizers``."""
import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard

from beam_pipeline.transforms.tiktoken_encoder import tiktoken_incompatibility
from beam_pipeline.transforms.token_encoder import load_encoder
from beam_pipeline.transforms.tokenizers_encoder import TokenizersEncoder

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
    (lambda s: s.__setitem__("normalizer", {"type": "Lowercase"}), "normalizer"),
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


# --- one tokenizer of each kind users bring, built here (no download), against tokenizers on edge cases -----

KIND_EDGE_CASES = EDGE_CASES + [
    "compatibility ﬁ ﬀ ｆｕｌｌ ｗｉｄｔｈ ㌀ ℌ ™ Ⅻ ﹤EOT﹥ Å Å ẞ İ ǅ ① ²", "marks a\u0316\u0301 q\u0307\u0323 \u0301lead",
    "Unicode 15+ ㋿ \U0001e030 \U00011f00", "zwj 👨‍👩‍👧 flags 🇫🇷 keycap 1️⃣", "a  b   c    d", "ends with one space ",
    "  starts with two", "▁ literal ▁x metaspace", "[CLS] [SEP] [UNK] inside", "<s>x</s> <unk>", "<EOT>z<META>",
    "url https://example.org/a?b=c&d=e#f, (parens) [brackets] {braces} \"quotes\" 'single'", "x" * 150 + " ok",
    "日本語の文章です。句読点、そして漢字。", "\x00\x01\x1f\x7f\x85\xa0\u2028\ufeff\ufffd controls",
]


def _trained(kind: str) -> str:
    """A small tokenizer of ``kind`` trained on the sample, as the JSON a user would bring."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    texts = sample_texts()[:200] + KIND_EDGE_CASES
    if kind == "bytelevel-nfkc":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<EOT>", "<META>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "split-bytelevel":  # the shape of a tiktoken-format vocabulary converted (Llama 3, tekken)
        tok = Tokenizer(models.BPE())
        pattern = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        from tokenizers import Regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "sentencepiece-bpe":  # transformers' LlamaConverter (legacy): Prepend + Replace, byte fallback
        tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"]
                                      + [f"<0x{b:02X}>" for b in range(256)])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")  # for training only: no ▁ inside tokens
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(texts, trainer)
    if kind == "sentencepiece-bpe":
        tok.pre_tokenizer = None
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return tok.to_str()


@pytest.mark.parametrize("kind, engine", [
    ("bytelevel-nfkc", "tiktoken+nfkc"),
    ("split-bytelevel", "tiktoken"),
    ("sentencepiece-bpe", "word-cache:metaspace"),
    ("wordpiece", "word-cache:bert"),
])
def test_each_kind_takes_its_fast_engine_with_the_ids_of_tokenizers(kind, engine):
    from tokenizers import Tokenizer

    source = _trained(kind)
    encoder = load_encoder(source)
    assert encoder.engine == engine
    reference = Tokenizer.from_str(source)
    texts = sample_texts()[:300] + KIND_EDGE_CASES
    for batch in (texts, texts[::-1], KIND_EDGE_CASES):  # a warm cache gives the same ids
        ids, counts, engines = encoder.encode_batch_engines(batch)
        expected = [e.ids for e in reference.encode_batch(batch, add_special_tokens=False)]
        assert counts.tolist() == [len(e) for e in expected]
        assert ids.tolist() == [i for e in expected for i in e]
        assert sum(engines.values()) == len(batch) and engine in engines


def test_truncation_and_padding_are_switched_off():
    spec = json.loads(_trained("wordpiece"))
    spec["truncation"] = {"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
    spec["padding"] = {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "[PAD]"}
    encoder = load_encoder(json.dumps(spec))
    text = "a document much longer than eight tokens is kept whole, never cut nor padded"
    ids, counts = encoder.encode_batch([text, "x"])
    assert counts[0] > 8 and counts[1] == 1


def test_a_fast_engine_that_disagrees_on_the_probe_is_not_used(monkeypatch):
    from beam_pipeline.transforms import token_encoder
    from beam_pipeline.transforms.word_cache_encoder import WordCacheEncoder

    source = _trained("wordpiece")
    monkeypatch.setattr(token_encoder, "EDGE_PROBES", token_encoder.EDGE_PROBES + ["probe"])
    original = WordCacheEncoder.encode_batch_engines

    def wrong(self, texts):
        ids, counts, engines = original(self, texts)
        return ids + (1 if "probe" in texts else 0), counts, engines

    monkeypatch.setattr(WordCacheEncoder, "encode_batch_engines", wrong)
    assert load_encoder(source).engine == "tokenizers"


# --- SentencePiece BPE (byte fallback) through tiktoken: tiktoken:metaspace -------------------------------------

SPM_EDGE_CASES = KIND_EDGE_CASES + [
    *(" " * n + "x" for n in range(1, 40)), *("x" + " " * n for n in range(1, 40)), " " * 100 + "\n" + " " * 33,
    "EEEE ======== -------- ******** ________ !!!! ^^^^^ aaaaaaaaa ulululu eeee tt.).).)", "\u2581" * 7 + " \u2581 x",
    "\u2581lead \u2581\u2581two trail\u2581", "\n", "x\n y\n\n  z", "unknown 𓀀𓀁 \U0010fffd 🦜 ꙮ \x00\x07 bytes",
    "mixed\u2581 spaces\u3000ideographic\u00a0nbsp", "word" * 500, "indent\n        def f(x):\n            return x",
]


def _sentencepiece_converted() -> str:
    """The sentencepiece-bpe kind with its merges as transformers' ``LlamaConverter`` writes a SentencePiece
    model's: every split of a piece into two pieces, pieces in score (here id) order."""
    spec = json.loads(_trained("sentencepiece-bpe"))
    vocab = spec["model"]["vocab"]
    merges = []
    for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(splits, key=lambda split: (vocab[split[0]], vocab[split[1]]))
    spec["model"]["merges"] = [list(merge) for merge in merges]
    return json.dumps(spec, ensure_ascii=False)


def _assert_ids_of_tokenizers(encoder, source: str, batches) -> None:
    from tokenizers import Tokenizer

    reference = Tokenizer.from_str(source)
    for batch in batches:
        ids, counts, engines = encoder.encode_batch_engines(batch)
        expected = [e.ids for e in reference.encode_batch(batch, add_special_tokens=False)]
        assert counts.tolist() == [len(e) for e in expected]
        assert ids.dtype == np.dtype("<u4") and ids.tolist() == [i for e in expected for i in e]
        assert sum(engines.values()) == len(batch)


def test_sentencepiece_bpe_as_converted_takes_tiktoken_metaspace_with_the_ids_of_tokenizers():
    from beam_pipeline.transforms.metaspace_encoder import metaspace_plan

    source = _sentencepiece_converted()
    plan = metaspace_plan(json.loads(source))
    assert not isinstance(plan, str)
    encoder = load_encoder(source)
    assert encoder.engine == "tiktoken:metaspace"
    texts = sample_texts()[:300] + SPM_EDGE_CASES
    _assert_ids_of_tokenizers(encoder, source, [texts, SPM_EDGE_CASES, ["", "x", ""], []])
    ids, counts, engines = encoder.encode_batch_engines(["plain text", "<s>x</s>", "\U0001f99c"])
    assert engines == {"tiktoken:metaspace": 2, "tokenizers": 1}  # the added token's text: tokenizers, whole
    from tokenizers import Tokenizer
    parrot = [Tokenizer.from_str(source).id_to_token(int(i)) for i in ids[-4:]]
    assert parrot == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x9C>"]  # not in the vocabulary: its UTF-8 bytes
    # every piece as a word, doubled, and the words of the probe: as tokenizers
    words = [w.replace("\u2581", " ") for w in plan.probe_words]
    _assert_ids_of_tokenizers(encoder, source, [["\n".join(words[i:i + 500]) for i in range(0, len(words), 500)]])


def _second_split(spec: dict, to_the_end: bool) -> None:
    """Take out the second merge of the first piece made by two, or move it to the end of the merges."""
    merges = spec["model"]["merges"]
    i = next(i for i in range(1, len(merges)) if "".join(merges[i]) == "".join(merges[i - 1]))
    moved = merges.pop(i)
    if to_the_end:
        merges.append(moved)


@pytest.mark.parametrize("change, reason", [
    (lambda s: s["model"].__setitem__("byte_fallback", False), "byte fallback"),
    (lambda s: _second_split(s, to_the_end=False), "not a merge"),
    (lambda s: _second_split(s, to_the_end=True), "not consecutive"),
    (lambda s: s["model"]["vocab"].__setitem__("a b", 10 ** 6), "space"),
    (lambda s: s["model"].__setitem__("continuing_subword_prefix", "##"), "continuing_subword_prefix"),
    (lambda s: s.__setitem__("pre_tokenizer", {"type": "Metaspace", "replacement": "\u2581",
                                               "prepend_scheme": "always", "split": True}), "SentencePiece-style"),
])
def test_sentencepiece_bpe_tiktoken_would_encode_differently_is_not_planned(change, reason):
    from beam_pipeline.transforms.metaspace_encoder import metaspace_plan

    spec = json.loads(_sentencepiece_converted())
    change(spec)
    assert reason in metaspace_plan(spec)


def test_sentencepiece_bpe_trained_by_tokenizers_keeps_the_word_cache():
    from beam_pipeline.transforms.metaspace_encoder import metaspace_plan

    source = _trained("sentencepiece-bpe")  # one merge per piece: tiktoken could merge another split
    assert "not a merge" in metaspace_plan(json.loads(source))
    assert load_encoder(source).engine == "word-cache:metaspace"


def test_tiktoken_metaspace_that_disagrees_on_the_probe_is_not_used(monkeypatch):
    from beam_pipeline.transforms.metaspace_encoder import MetaspaceTiktokenEncoder

    original = MetaspaceTiktokenEncoder._ranks

    def wrong(self, text):  # reversed on the texts of several lines (the probe's, among others)
        ranks = original(self, text)
        return ranks[::-1].copy() if ranks is not None and text.count("\n") > 100 else ranks

    monkeypatch.setattr(MetaspaceTiktokenEncoder, "_ranks", wrong)
    assert load_encoder(_sentencepiece_converted()).engine == "word-cache:metaspace"


# --- the probe's verdict, kept once per machine ---------------------------------------------------------------


def _counting_probes(monkeypatch) -> list:
    """The probes :func:`load_encoder` runs from now on (each a call of the real ``_same_ids``), on the edge
    cases only: these tests are about keeping the verdict, not about the probe's texts (tested above)."""
    from beam_pipeline.transforms import token_encoder

    monkeypatch.setattr(token_encoder, "_probe_texts", lambda tokenizer, added: list(token_encoder.EDGE_PROBES))
    calls: list = []
    real = token_encoder._same_ids

    def counted(fast, reference, texts):
        calls.append(fast.engine)
        return real(fast, reference, texts)

    monkeypatch.setattr(token_encoder, "_same_ids", counted)
    return calls


def test_a_kept_verdict_picks_the_probed_engine_without_probing_again(tmp_path, monkeypatch):
    from beam_pipeline.transforms.token_encoder import probe_verdict_key

    source = open(SAMPLE_TOKENIZER, encoding="utf-8").read()
    probes = _counting_probes(monkeypatch)
    first = load_encoder(source, verdicts=str(tmp_path))
    assert first.engine == "tiktoken" and probes == ["tiktoken"]
    kept = json.loads((tmp_path / f"{probe_verdict_key(source)}.json").read_text())
    assert kept["candidate"] == 0 and kept["engine"] == "tiktoken"
    second = load_encoder(source, verdicts=str(tmp_path))
    assert second.engine == "tiktoken" and probes == ["tiktoken"], "the kept verdict was probed again"
    texts = sample_texts()[:200] + EDGE_CASES
    assert all(np.array_equal(a, b) for a, b in zip(first.encode_batch(texts), second.encode_batch(texts)))
    assert [p.name for p in tmp_path.iterdir()] == [f"{probe_verdict_key(source)}.json"]  # no temporary left


def test_the_verdict_key_follows_the_code_of_every_engine_module(tmp_path, monkeypatch):
    """Each engine lives in a module of its own (tiktoken_encoder.py, word_cache_encoder.py, ...): an edit of
    any of them, as of token_encoder.py, is a new key, so a new probe."""
    import sys

    from beam_pipeline.transforms import token_encoder
    from beam_pipeline.transforms.tiktoken_encoder import TiktokenEncoder

    engines = (TokenizersEncoder, TiktokenEncoder, token_encoder.WordCacheEncoder,
               token_encoder.MetaspaceTiktokenEncoder)
    assert {sys.modules[engine.__module__] for engine in engines} == set(token_encoder.ENGINE_MODULES)
    source = open(SAMPLE_TOKENIZER, encoding="utf-8").read()
    key = token_encoder.probe_verdict_key(source)
    for module in (token_encoder, *token_encoder.ENGINE_MODULES):
        edited = tmp_path / f"{module.__name__}.py"
        edited.write_bytes(open(module.__file__, "rb").read() + b"# edited\n")
        monkeypatch.setattr(module, "__file__", str(edited))
        assert token_encoder.probe_verdict_key(source) != key, module.__name__
        monkeypatch.undo()
    assert token_encoder.probe_verdict_key(source) == key


def test_a_verdict_is_kept_per_tokenizer_and_a_bad_one_means_a_new_probe(tmp_path, monkeypatch):
    from beam_pipeline.transforms.token_encoder import probe_verdict_key

    source = open(SAMPLE_TOKENIZER, encoding="utf-8").read()
    other = _variant(source, lambda s: s["decoder"].__setitem__("trim_offsets", False))  # same ids, other file
    assert probe_verdict_key(other) != probe_verdict_key(source)
    probes = _counting_probes(monkeypatch)
    load_encoder(source, verdicts=str(tmp_path))
    load_encoder(other, verdicts=str(tmp_path))
    assert len(probes) == 2, "a verdict of another tokenizer was used"
    verdict = tmp_path / f"{probe_verdict_key(source)}.json"
    for bad in ("{not json", json.dumps({"candidate": 7, "engine": "tiktoken"}),
                json.dumps({"candidate": 0, "engine": "word-cache"})):
        verdict.write_text(bad)
        assert load_encoder(source, verdicts=str(tmp_path)).engine == "tiktoken"
        assert json.loads(verdict.read_text())["candidate"] == 0  # probed and kept again
    assert len(probes) == 5
    verdict.write_text(json.dumps({"candidate": None, "engine": "tokenizers"}))  # the probe had failed
    assert load_encoder(source, verdicts=str(tmp_path)).engine == "tokenizers" and len(probes) == 5


def test_a_folder_that_cannot_be_written_only_means_probing_again(tmp_path, monkeypatch):
    source = open(SAMPLE_TOKENIZER, encoding="utf-8").read()
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    probes = _counting_probes(monkeypatch)
    assert load_encoder(source, verdicts=str(blocked / "probes")).engine == "tiktoken"
    assert load_encoder(source, verdicts=str(blocked / "probes")).engine == "tiktoken"
    assert len(probes) == 2
