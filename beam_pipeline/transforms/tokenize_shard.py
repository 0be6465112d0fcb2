"""Stage 8, tokenize + pack + shard: gold text -> fixed-length token shards.

Input: the partitions of the ``gold`` layer. Output: shard files
(``<name>.bin`` tokens and ``<name>.idx.parquet`` document index, plus a
``.meta.json`` sidecar) written to the layer's ``shards/`` folder; the driver
then builds the manifest and publishes the dataset (``docs/format.md``).

The data flow (DESIGN.md, "global order")::

    gold partition i ─ tokenize in batches ─ (doc_id, source, domain, tokens) ─┐
                     └─ tokens + EOS per domain ─ CombinePerKey(sum) ─ shards per domain (side input)
                                                                            │
      (shard xxh3(seed, doc_id) % count of its domain, document) ─ GroupByKey(shard)
      ─ sort by (xxh3(seed, doc_id), doc_id) ─ pack ─ write the shard

1. one task per gold partition tokenizes its documents in batches with a
   Hugging Face ``tokenizers`` model (loaded once per worker in ``setup()``
   through ``shared.Shared``) and counts the tokens per domain bucket;
2. the sums per domain fix each bucket's shard count ``ceil(tokens / shard_tokens)``;
3. each document goes to shard ``xxh3(seed, doc_id) % count`` of its bucket
   (shards are homogeneous by bucket) through the runner's ``GroupByKey``,
   its tokens as little-endian uint32 bytes;
4. inside a shard, order documents by (xxh3(seed, doc_id), doc_id): a global
   deterministic shuffle that no runner or bundle size can change; the sort
   spills to local run files above ``tokenize.sort_memory_bytes``
   (:mod:`beam_pipeline.transforms.shard_stream`);
5. concatenate with EOS after every document, cut into ``seq_len`` sequences,
   pad the last one, writing the shard file as a stream.

A task holds one gold partition, or ``sort_memory_bytes`` of one shard, at a time.

**After a kill** (:mod:`beam_pipeline.transforms.task_ledger`): each written
shard gets a task record (``_tasks/shard.<name>.json``, naming its three
files). A rerun of the same layer keeps the finished shards: documents bound
for them are dropped before ``GroupByShard`` (not moved, sorted, packed or
written again) and their sidecars are read back. Tokenizing the gold
partitions (step 1) restarts whole: which shard a document goes to depends on
its domain's token total (step 2), known only once every partition is
tokenized, and a document's tokens are not kept between jobs (only shards
are; keeping them would be a second copy of the shuffle's input in files of
our own). The stage's counts come from step 1, so they are exact.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils import shared

from beam_pipeline.config.corpus import TokenizeConfig
from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.records.hashing import sha256_bytes, stable_hash64
from beam_pipeline.storage.layers import join, parquet_batches, read_bytes
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.layer_io import WRITTEN, PartitionIndexes
from beam_pipeline.transforms.shard_stream import SpillSorter, write_packed_shard
from beam_pipeline.transforms.task_ledger import SHARD_TASK, TaskLedger, finished_shards, shard_files, unfinished
from beam_pipeline.transforms.token_encoder import load_encoder, probe_verdicts_folder
from beam_pipeline.transforms.tokenizers_encoder import Encoder

STAGE = "tokenize"
VERSION = "1"
TOKEN_WIRE_DTYPE = np.dtype("<u4")  # tokens travel between steps as little-endian uint32 bytes
GOLD_COLUMNS = ["doc_id", "source", "domain", "text"]

_DOMAIN_TOKENS, _DOCUMENTS = "domain_tokens", "documents"


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """What the pipeline needs to know about a tokenizer, read once in the driver."""

    path: str
    sha256: str
    vocab_size: int
    eos_id: int
    pad_id: int

    @property
    def dtype(self) -> str:
        """uint16 when every id fits, else uint32 (little-endian on disk)."""
        return "uint16" if self.vocab_size <= 1 << 16 else "uint32"


def inspect_tokenizer(config: TokenizeConfig) -> TokenizerInfo:
    """Load the tokenizer in the driver: fail early on a bad path or missing token."""
    from tokenizers import Tokenizer

    data = read_bytes(config.tokenizer)
    tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    ids = {}
    for role, token in (("eos_token", config.eos_token), ("pad_token", config.pad_token or config.eos_token)):
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenize.{role}: {token!r} is not in the vocabulary of {config.tokenizer}")
        ids[role] = token_id
    return TokenizerInfo(
        path=config.tokenizer,
        sha256=sha256_bytes(data),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        eos_id=ids["eos_token"],
        pad_id=ids["pad_token"],
    )


class TokenizePackShard(beam.PTransform):
    """pbegin -> {"written": PCollection[shard sidecar dict], "counts"}; shards written under ``directory``.

    ``gold_paths``: the partitions of the gold layer, read once ``after`` is committed.
    """

    def __init__(
        self,
        config: TokenizeConfig,
        tokenizer: TokenizerInfo,
        seed: int,
        directory: str,
        gold_paths: tuple[str, ...],
        after=(),
    ):
        super().__init__()
        self._config = config
        self._tokenizer = tokenizer
        self._seed = seed
        self._directory = directory
        self._gold = tuple(gold_paths)
        self._after = tuple(after)

    def expand(self, pbegin):
        tokenized = (
            pbegin
            | "Partitions" >> PartitionIndexes(len(self._gold), self._after)
            | "Tokenize"
            >> beam.ParDo(
                TokenizePartitionFn(self._gold, self._tokenizer.path, self._tokenizer.sha256, self._config.batch_size)
            ).with_outputs(_DOMAIN_TOKENS, COUNTS, main=_DOCUMENTS)
        )
        tokens_per_domain = (
            tokenized[_DOMAIN_TOKENS]  # (domain, tokens + EOS) per partition
            | "KeyedByDomain" >> beam.Map(lambda kv: kv).with_output_types(StrKeyed)
            | "SumPerDomain" >> beam.CombinePerKey(sum)
        )
        keyed = tokenized[_DOCUMENTS] | "KeyByShard" >> beam.Map(
            assign_shard, beam.pvalue.AsDict(tokens_per_domain), self._config.shard_tokens, self._seed
        ).with_output_types(StrKeyed)
        layer_path = self._directory.rsplit("/", 1)[0]
        finished = frozenset(finished_shards(layer_path))  # by an earlier, killed run: kept, not written again
        if finished:
            keyed = keyed | "SkipFinishedShards" >> beam.Filter(unfinished, finished)
        shards = (
            keyed
            | "GroupByShard" >> beam.GroupByKey()
            | "PackAndWrite"
            >> beam.ParDo(
                WriteShardFn(
                    self._directory, self._tokenizer, self._config.seq_len, self._seed, self._config.sort_memory_bytes
                )
            )
        )
        if finished:
            replayed = (
                pbegin
                | "FinishedShards" >> beam.Create(sorted(finished))
                | "ReplayShard" >> beam.Map(replayed_shard, TaskLedger(layer_path, 0), self._directory)
            )
            shards = (shards, replayed) | "WrittenAndReplayed" >> beam.Flatten()
        return {WRITTEN: shards, COUNTS: tokenized[COUNTS]}


def replayed_shard(name: str, ledger: TaskLedger, directory: str) -> dict:
    """The sidecar of shard ``name``, written by an earlier, killed run (its task record checked)."""
    if ledger.done_task(SHARD_TASK + name) is None:
        raise RuntimeError(
            f"shard {name} of {ledger.layer_path} was finished when the job was built, but its task record "
            f"or files are gone"
        )
    return json.loads(read_bytes(join(directory, f"{name}.meta.json")))


_TOKENIZERS = shared.Shared()


class TokenizePartitionFn(beam.DoFn):
    """Gold partition index -> its tokenized documents ({doc_id, source, domain, tokens}: tokens without
    EOS, as :data:`TOKEN_WIRE_DTYPE` bytes); tagged ``domain_tokens``: (domain, tokens + one EOS per
    document) of the partition, and its counts."""

    def __init__(self, gold_paths: tuple[str, ...], path: str, sha256: str, batch_size: int):
        self._gold = gold_paths
        self._path = path
        self._sha256 = sha256
        self._batch_size = batch_size

    def setup(self):
        self._tokenizer = _TOKENIZERS.acquire(self._load, tag=self._sha256)
        self._tally = Tally(STAGE)

    def _load(self) -> Encoder:
        data = read_bytes(self._path)
        if sha256_bytes(data) != self._sha256:
            raise RuntimeError(f"tokenizer {self._path} changed during the run (sha256 mismatch)")
        return load_encoder(data.decode("utf-8"), name=self._sha256, verdicts=probe_verdicts_folder())

    def process(self, index: int) -> Iterator:
        per_domain: collections.Counter = collections.Counter()
        for batch in read_partition_batches(self._gold[index], GOLD_COLUMNS, self._batch_size):
            doc_ids, sources, domains = (batch.column(name).to_pylist() for name in GOLD_COLUMNS[:3])
            ids, counts, engines = self._tokenizer.encode_batch_engines(batch.column("text").to_pylist())
            for engine, documents in engines.items():  # which engine encoded them: "engine:<name>" counts
                self._tally.inc(f"engine:{engine}", n=documents)
            data = ids.tobytes()  # TOKEN_WIRE_DTYPE
            ends = (np.cumsum(counts) * TOKEN_WIRE_DTYPE.itemsize).tolist()
            starts = [0, *ends[:-1]]
            for doc_id, source, domain, start, end in zip(doc_ids, sources, domains, starts, ends):
                yield {"doc_id": doc_id, "source": source, "domain": domain, "tokens": data[start:end]}
            for domain, tokens in _sums_by(domains, counts + 1).items():
                per_domain[domain] += tokens
            for source, documents in collections.Counter(sources).items():
                self._tally.entered(source, documents)
                self._tally.passed(source, documents)
        for domain, tokens in sorted(per_domain.items()):
            yield beam.pvalue.TaggedOutput(_DOMAIN_TOKENS, (domain, tokens))
        yield from self._tally.tagged()


def read_partition_batches(path: str, columns: list[str], rows: int) -> Iterator:
    """The record batches (of at most ``rows`` rows) of a Parquet partition."""
    with FileSystems.open(path) as f:
        yield from parquet_batches(f, rows, columns)


def _sums_by(keys: list[str], values: np.ndarray) -> dict[str, int]:
    """The sum of ``values`` per key."""
    names, positions = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    sums = np.zeros(len(names), dtype=np.int64)
    np.add.at(sums, positions, values)
    return {name: int(total) for name, total in zip(names.tolist(), sums.tolist())}


def shard_count(domain_tokens: int, shard_tokens: int) -> int:
    return max(1, math.ceil(domain_tokens / shard_tokens))


def shard_name(domain: str, index: int, count: int) -> str:
    return f"{domain}-{index:05d}-of-{count:05d}"


def assign_shard(row: dict, domain_tokens: dict, shard_tokens: int, seed: int) -> tuple[str, dict]:
    """(shard name, row): shard ``xxh3(seed, "shard", doc_id) % count`` of the row's domain bucket."""
    count = shard_count(domain_tokens[row["domain"]], shard_tokens)
    index = stable_hash64(seed, "shard", row["doc_id"]) % count
    return shard_name(row["domain"], index, count), row


def shuffle_order(seed: int, doc_id: str) -> tuple[int, str]:
    """Position of a document in the global deterministic shuffle."""
    return (stable_hash64(seed, "order", doc_id), doc_id)


class WriteShardFn(beam.DoFn):
    """(shard name, its tokenized documents) -> shard files written atomically; yields the sidecar."""

    def __init__(self, directory: str, tokenizer: TokenizerInfo, seq_len: int, seed: int, sort_memory_bytes: int):
        self._directory = directory
        self._tokenizer = tokenizer
        self._seq_len = seq_len
        self._seed = seed
        self._sort_memory = sort_memory_bytes

    def process(self, keyed: tuple[str, Iterable[dict]]) -> Iterator[dict]:
        name, rows = keyed
        domain = None
        with SpillSorter(self._sort_memory) as ordered:  # a shard is larger than a worker's memory should hold
            for row in rows:
                domain = row["domain"]
                ordered.add(shuffle_order(self._seed, row["doc_id"]), row["source"], row["tokens"])
            meta = write_packed_shard(
                self._directory,
                name,
                ordered.sorted_items(),
                domain=domain,
                eos_id=self._tokenizer.eos_id,
                pad_id=self._tokenizer.pad_id,
                seq_len=self._seq_len,
                dtype=self._tokenizer.dtype,
            )
        layer_path, output = self._directory.rsplit("/", 1)
        TaskLedger(layer_path, 0).write_task(SHARD_TASK + name, {}, files=shard_files(output, name))
        yield meta


SHARDS = "shards"


def collect_shards(layer, _partitions: int) -> dict:
    """The tokenize layer's ledger extras: every shard's sidecar (by name) and the dataset id."""
    from apache_beam.io.filesystems import FileSystems

    from beam_pipeline.storage.manifest import dataset_id_of

    directory = layer.output_path(SHARDS)
    metas = [
        json.loads(read_bytes(m.path)) for m in FileSystems.match([join(directory, "*.meta.json")])[0].metadata_list
    ]
    shards = sorted(metas, key=lambda s: s["name"])
    return {"shards": shards, "dataset_id": dataset_id_of(shards)}
