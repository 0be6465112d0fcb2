import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline.config.corpus import TokenizeConfig
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.storage.layers import part_name, write_partition
from beam_pipeline.storage.schemas import GOLD
from conftest import run_stage_job
from beam_pipeline.transforms import shard_stream
from beam_pipeline.transforms.shard_stream import SpillSorter, write_packed_shard
from beam_pipeline.transforms.tokenize_shard import (
    TokenizePackShard, assign_shard, inspect_tokenizer, shard_count, shuffle_order)

OPTIONS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def arr(*ids):
    return np.asarray(ids, dtype=np.uint32)


def _packed(tmp_path, documents, **kwargs):
    """Write (doc_id, source, ids) documents, in order, as shard ``s``; (tokens, index rows, meta)."""
    items = (((0, doc_id), source, ids) for doc_id, source, ids in documents)
    meta = write_packed_shard(str(tmp_path), "s", items, domain="d", **kwargs)
    tokens = np.fromfile(tmp_path / "s.bin", dtype=np.dtype(kwargs["dtype"]).newbyteorder("<"))
    assert json.loads((tmp_path / "s.meta.json").read_text()) == meta
    return tokens, pq.read_table(tmp_path / "s.idx.parquet").to_pylist(), meta


def test_pack_documents_records_boundaries_and_pads(tmp_path):
    tokens, index, meta = _packed(tmp_path, [("a", "s", arr(5, 6, 7)), ("b", "s", arr(8)), ("c", "t", arr(9, 10, 11, 12))],
                                  eos_id=0, pad_id=1, seq_len=4, dtype="uint16")
    assert tokens.tolist() == [5, 6, 7, 0, 8, 0, 9, 10, 11, 12, 0, 1]
    assert meta["tokens_bytes"] == 24 and meta["sequences"] == 3 and meta["pad_tokens"] == 1 and meta["tokens"] == 11
    assert index == [
        {"doc_id": "a", "source": "s", "token_start": 0, "token_count": 3},
        {"doc_id": "b", "source": "s", "token_start": 4, "token_count": 1},
        {"doc_id": "c", "source": "t", "token_start": 6, "token_count": 4},
    ]


def test_pack_exact_fit_has_no_padding_and_uint32(tmp_path):
    tokens, _, meta = _packed(tmp_path, [("a", "s", arr(70000, 2, 3))], eos_id=0, pad_id=0, seq_len=4, dtype="uint32")
    assert tokens.tolist() == [70000, 2, 3, 0] and meta["pad_tokens"] == 0


def test_a_shard_sorted_through_spilled_runs_is_the_in_memory_one(tmp_path, monkeypatch):
    """The external sort (runs of ~2 KB here) and the streamed writes (a write every ~1 KB) give the bytes of
    one in-memory sort and one write."""
    rng = np.random.default_rng(7)
    documents = [(f"doc{i}", f"src{i % 3}", rng.integers(0, 50_000, size=int(rng.integers(1, 60))).astype("<u4"))
                 for i in range(300)]

    def shard(folder, memory_bytes):
        folder.mkdir()
        with SpillSorter(memory_bytes) as sorter:
            for doc_id, source, ids in documents:
                sorter.add(shuffle_order(5, doc_id), source, ids.tobytes())
            meta = write_packed_shard(str(folder), "s", sorter.sorted_items(), domain="d", eos_id=1, pad_id=2,
                                      seq_len=64, dtype="uint16")
        return sorter.spilled_runs, meta

    one_run, in_memory = shard(tmp_path / "memory", 1 << 30)
    monkeypatch.setattr(shard_stream, "WRITE_BUFFER_BYTES", 1024)
    spilled_runs, spilled = shard(tmp_path / "spilled", 2048)
    assert one_run == 0 and spilled_runs > 20
    assert spilled == in_memory
    for name in ("s.bin", "s.idx.parquet", "s.meta.json"):
        assert (tmp_path / "memory" / name).read_bytes() == (tmp_path / "spilled" / name).read_bytes()
    order = [r["doc_id"] for r in pq.read_table(tmp_path / "spilled" / "s.idx.parquet").to_pylist()]
    assert order == sorted((d for d, _, _ in documents), key=lambda d: shuffle_order(5, d))
    assert not list(tmp_path.glob("**/.tmp-*"))


def test_shard_assignment_is_deterministic_and_in_range():
    assert shard_count(0, 100) == 1 and shard_count(100, 100) == 1 and shard_count(101, 100) == 2
    names = {assign_shard({"doc_id": f"d{i}", "domain": "web"}, {"web": 1000}, 100, seed=3)[0] for i in range(500)}
    assert names == {f"web-{i:05d}-of-00010" for i in range(10)}
    assert assign_shard({"doc_id": "d1", "domain": "web"}, {"web": 1000}, 100, 3) == \
        assign_shard({"doc_id": "d1", "domain": "web"}, {"web": 1000}, 100, 3)
    assert shuffle_order(1, "x") != shuffle_order(2, "x")


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    text = ["The quick brown fox jumps over the lazy dog."] * 5
    tokenizer.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def test_inspect_tokenizer_rejects_unknown_tokens(tokenizer_path):
    info = inspect_tokenizer(TokenizeConfig(tokenizer=tokenizer_path))
    assert info.eos_id == 0 and info.pad_id == 0 and info.dtype == "uint16"
    with pytest.raises(ValueError, match="tokenize.pad_token: '<pad>' is not in the vocabulary"):
        inspect_tokenizer(TokenizeConfig(tokenizer=tokenizer_path, pad_token="<pad>"))


def run_tokenize(root, gold, config, info, partitions: int, options=OPTIONS) -> str:
    """Gold rows -> partitions by xxh3(doc_id) % partitions (as select writes them) -> the stage's shards."""
    paths = []
    for i in range(partitions):
        rows = sorted((r for r in gold if bucket_of(r["doc_id"], partitions) == i), key=lambda r: r["doc_id"])
        write_partition(str(root / "gold"), i, partitions, rows, GOLD)
        paths.append(str(root / "gold" / part_name(i, partitions)))
    run_stage_job(str(root), "tokenize", lambda p, layer: p | TokenizePackShard(
        config, info, seed=0, directory=layer.output_path("shards"), gold_paths=tuple(paths)), {}, partitions,
        options=options)
    return str(root / "layers" / "tokenize" / "test" / "shards")


def read_shards(directory: str) -> dict:
    """{file name: bytes} of the shards (tokens, index, sidecar)."""
    return {f: open(os.path.join(directory, f), "rb").read() for f in sorted(os.listdir(directory))}


def test_transform_writes_shards_that_decode_back(tokenizer_path, tmp_path):
    from tokenizers import Tokenizer
    config = TokenizeConfig(tokenizer=tokenizer_path, seq_len=16, shard_tokens=64)
    info = inspect_tokenizer(config)
    texts = {f"d{i}": f"The lazy dog number {i} jumps over the quick brown fox." for i in range(12)}
    gold = [{"doc_id": k, "source": "s", "domain": "web" if i % 2 else "code", "text": v}
            for i, (k, v) in enumerate(texts.items())]
    directory = run_tokenize(tmp_path / "one", gold, config, info, partitions=1)
    assert read_shards(directory) == read_shards(run_tokenize(tmp_path / "three", gold, config, info, partitions=3))
    spilling = config.model_copy(update={"sort_memory_bytes": 1})  # a run file per document
    assert read_shards(directory) == read_shards(run_tokenize(tmp_path / "spill", gold, spilling, info, partitions=3))
    metas = [json.load(open(os.path.join(directory, f))) for f in sorted(os.listdir(directory))
             if f.endswith(".meta.json")]
    assert sum(m["documents"] for m in metas) == 12
    assert {m["domain"] for m in metas} == {"web", "code"}
    tokenizer = Tokenizer.from_file(tokenizer_path)
    for meta in metas:
        tokens = np.fromfile(os.path.join(directory, meta["tokens_file"]), dtype="<u2")
        assert tokens.size == meta["sequences"] * 16 == meta["tokens"] + meta["pad_tokens"]
        index = pq.read_table(os.path.join(directory, meta["index_file"])).to_pylist()
        for row in index:
            span = tokens[row["token_start"]:row["token_start"] + row["token_count"]]
            assert tokenizer.decode(span.tolist()) == texts[row["doc_id"]]
            assert tokens[row["token_start"] + row["token_count"]] == info.eos_id


def test_the_stage_counts_which_engine_encoded_the_documents(tokenizer_path, tmp_path):
    """``engine:<name>`` counts in the ledger's ``other``: the engine load_encoder chose (tiktoken for a plain
    byte-level BPE), documents that hold an added token included; in and passed are as before."""
    config = TokenizeConfig(tokenizer=tokenizer_path, seq_len=16, shard_tokens=64)
    info = inspect_tokenizer(config)
    gold = [{"doc_id": f"d{i}", "source": "s", "domain": "web", "text": f"document {i} <|endoftext|> ok"}
            for i in range(5)]
    rows = sorted(gold, key=lambda r: r["doc_id"])
    write_partition(str(tmp_path / "gold"), 0, 1, rows, GOLD)
    paths = (str(tmp_path / "gold" / part_name(0, 1)),)
    ledger = run_stage_job(str(tmp_path), "tokenize", lambda p, layer: p | TokenizePackShard(
        config, info, seed=0, directory=layer.output_path("shards"), gold_paths=paths), {}, 1, options=OPTIONS)
    counts = ledger["counts"]
    assert counts["in"] == counts["passed"] == 5
    assert counts["other"] == {"engine:tiktoken": 5}
