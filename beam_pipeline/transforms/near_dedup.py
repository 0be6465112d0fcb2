"""Stage 4, near dedup: clusters of near-duplicate documents, boilerplate lines, repeated spans.

Input: ``documents`` of the ingest layer (``doc_id``, ``source``,
``source_rank``, ``date``, ``text``) and, for incremental dedup, the
``signatures`` of earlier near-dedup layers (``near_dedup.against``).
Outputs:

* ``annotations`` (:data:`~beam_pipeline.schemas.NEAR_DEDUP`): one row per
  document: its cluster, the cluster's representative, ``is_duplicate``, and
  the boilerplate lines and repeated spans that ``select`` strips. Nothing is
  deleted here; the policy rule ``near_duplicate`` decides.
* ``signatures`` (:data:`~beam_pipeline.schemas.NEAR_SIGNATURE`): MinHash
  signature, band keys, SimHash and block keys of every signed document: the
  persisted band index that a later snapshot dedups against.
* ``large_clusters`` (:data:`~beam_pipeline.schemas.LARGE_CLUSTER`): clusters
  above ``max_cluster_size``, with a deterministic sample of members.

The data flow (``docs/near_dedup.md`` has the reasoning and the numbers)::

    documents partition i --SignSpillAndWrite (one task per partition)--> members spill file of partition i
      |   (BoilerplateLines: side input)  |-- signatures partition i, written by the task
      |                                   |-- band / block keys -> spill files by bucket key % n
      |                                   |   (+ previous versions' signature partitions, spilled alike)
      |                                   v
      |        MinHashEdges: GroupByKey(bucket) of file names -> a star per band key
      |                      -> VerifyPairs (pairs through files, signatures read from their partitions)
      |        SimHashEdges: GroupByKey(bucket) of file names -> pairs <= k bits per block key
      |                                   v
      |                 ConnectedComponents (large-star/small-star rounds through edge spill files)
      |                                   v  labels spilled by the partition of their doc_id
      +--RepeatedSpans--> AssignClusters: one task per partition: member + label + spans
                                |  -> documents in no cluster: annotation rows
                     one task per bucket of cluster labels -> representative = min(previous version first,
                                |     source rank, -quality, date (missing last), doc_id)
                                +-- size <= max_cluster_size: every other member is a duplicate
                                +-- larger: reported; a member is a duplicate only if it
                                    verifies against the representative itself (VerifyPairs)
                     annotation rows -> spill files by partition -> one task writes each partition

Everything per document of the corpus (text, signatures, band keys, candidate
pairs, line counts, windows of repeated spans, edges, labels, members, annotation
rows) goes through
files (:mod:`~beam_pipeline.transforms.lsh_files`,
:mod:`~beam_pipeline.transforms.connected_components`); the runner groups
file names, and carries the verified edges and the pairs to check against a
representative from the task that finds them to the one that spills them.
Every grouping key is a str (doc_id, cluster label) or a non-negative 63-bit
int (band, block, line and window keys), typed with ``StrKeyed``/``IntKeyed``.
Representatives are minima over a total order ending in doc_id, and cluster
ids are the smallest doc_id of the component, so neither depends on the
runner, the parallelism or the order of delivery.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.accounting import StageCounters
from beam_pipeline.config import ConfigError, NearDedupConfig
from beam_pipeline.dedup import minhash, simhash
from beam_pipeline.dedup.repetition import LINES_VERSION, SPANS_VERSION, line_keys, merge_ranges
from beam_pipeline.dedup.shingling import NORMALIZATION_VERSION, shingle_hashes
from beam_pipeline.hashing import bucket_of, sha256_bytes, stable_hash64
from beam_pipeline.layers import join, part_name, read_bytes, read_partition_rows
from beam_pipeline.schemas import LARGE_CLUSTER, NEAR_DEDUP, NEAR_SIGNATURE, dead_letter_row
from beam_pipeline.transforms.connected_components import ConnectedComponents
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import SPILL, GroupSpillFiles, PartitionIndexes, \
    SpillByPartition, WriteSpilledPartitions, WrittenPartitions, write_layer_partition, write_partition_spills
from beam_pipeline.transforms.line_dedup import SPAN, BoilerplateLines, RepeatedSpans
from beam_pipeline.transforms.lsh_files import AttachFirstFn, LshBucketFilesFn, SignatureFiles, SpillKeyedFn, \
    SpillPairsFn, decode_carry, keyed_record, read_keyed_groups, read_pair_spills, spill_lsh_records, \
    write_keyed_spills

STAGE = "near_dedup"
VERSION = "1"
ANNOTATIONS, SIGNATURES, LARGE_CLUSTERS, DEAD_LETTER = "annotations", "signatures", "large_clusters", "dead_letter"
OUTPUTS = {ANNOTATIONS: NEAR_DEDUP, SIGNATURES: NEAR_SIGNATURE, LARGE_CLUSTERS: LARGE_CLUSTER}
INPUT_COLUMNS = ["doc_id", "source", "source_rank", "date", "text"]

_MEMBERS, _PREVIOUS, _CLUSTERED, _CHECK, _ROWS = "members", "previous", "clustered", "check", "rows"
_BAND_SPILLS, _BLOCK_SPILLS = "band_spills", "block_spills"
_DATASET_ID = re.compile(r"^[0-9a-f]{64}$")


# --- parameters -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class NearDedupParams:
    """The resolved knobs of the stage (bands and rows chosen), picklable for workers."""

    seed: int
    shingle_kind: str
    shingle_size: int
    use_minhash: bool
    num_perm: int
    bands: int
    rows: int
    threshold: float
    verify: str
    verify_threshold: float
    use_simhash: bool
    max_hamming: int
    blocks: int
    max_rounds: int
    max_cluster_size: int
    sample_members: int
    lines: bool
    line_min_repeats: int
    line_min_chars: int
    span_sources: tuple[str, ...]
    span_min_words: int

    @classmethod
    def from_config(cls, config: NearDedupConfig) -> "NearDedupParams":
        m = config.minhash
        if m.bands is not None:
            bands, rows = m.bands, m.rows
        else:
            bands, rows = minhash.optimal_bands(m.threshold, m.num_perm, m.fp_weight, m.fn_weight)
        return cls(
            seed=config.seed, shingle_kind=config.shingles.kind, shingle_size=config.shingles.size,
            use_minhash=config.method in ("minhash", "both"), num_perm=m.num_perm, bands=bands, rows=rows,
            threshold=m.threshold, verify=config.verify,
            verify_threshold=config.verify_threshold if config.verify_threshold is not None else m.threshold,
            use_simhash=config.method in ("simhash", "both"), max_hamming=config.simhash.max_hamming,
            blocks=config.simhash.blocks or config.simhash.max_hamming + 1,
            max_rounds=config.max_rounds, max_cluster_size=config.max_cluster_size,
            sample_members=config.sample_members, lines=config.lines.enabled,
            line_min_repeats=config.lines.min_repeats, line_min_chars=config.lines.min_chars,
            span_sources=tuple(sorted(config.substrings.sources)), span_min_words=config.substrings.min_words)

    def signature_config(self) -> dict:
        """What makes two layers' signatures and band keys comparable (checked for ``against``)."""
        return {"normalization": NORMALIZATION_VERSION, "seed": self.seed,
                "shingles": {"kind": self.shingle_kind, "size": self.shingle_size},
                "minhash": {"num_perm": self.num_perm, "bands": self.bands, "rows": self.rows}
                if self.use_minhash else None,
                "simhash": {"max_hamming": self.max_hamming, "blocks": self.blocks} if self.use_simhash else None,
                "shingle_sets": self.verify == "jaccard"}


def stage_config(config: NearDedupConfig) -> dict:
    """The layer-key slice: the config (without ``against``, whose layer keys are inputs) and versions."""
    params = NearDedupParams.from_config(config)
    return {**config.model_dump(mode="json", exclude={"against"}),
            "signature": params.signature_config(),
            "versions": {"lines": LINES_VERSION, "spans": SPANS_VERSION}}


# --- the stage ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PreviousLayer:
    """An earlier near-dedup layer to dedup against: its key and signature partitions."""

    key: str
    path: str
    signature_paths: tuple[str, ...]


def resolve_against(root: str, entry: str, config: NearDedupConfig) -> PreviousLayer:
    """An ``against`` entry (a near_dedup layer path/URI, or a dataset id under ``root``) -> its layer.

    Raises :class:`ConfigError` when the layer is missing, incomplete or was
    made with incompatible signature settings (its band keys would never meet
    ours).
    """
    if _DATASET_ID.match(entry):
        manifest_path = join(root, "datasets", entry, "manifest.json")
        try:
            manifest = json.loads(read_bytes(manifest_path))
        except (IOError, OSError, ValueError) as err:
            raise ConfigError(f"near_dedup.against: dataset {entry} not found under {root} ({err})") from None
        keys = [s["layer_key"] for s in manifest["stages"] if s["name"] == STAGE]
        if not keys:
            raise ConfigError(f"near_dedup.against: dataset {entry} was built without a {STAGE} stage")
        path = join(root, "layers", STAGE, keys[0])
    else:
        path = entry.rstrip("/")
    try:
        ledger = json.loads(read_bytes(join(path, "_LEDGER.json")))
    except (IOError, OSError, ValueError):
        raise ConfigError(f"near_dedup.against: {entry!r} is not a complete {STAGE} layer "
                          f"(no readable {join(path, '_LEDGER.json')}); give the absolute path of "
                          f"<root>/layers/{STAGE}/<key> or a dataset id") from None
    if ledger.get("stage") != STAGE:
        raise ConfigError(f"near_dedup.against: {entry!r} is a {ledger.get('stage')} layer, not {STAGE}")
    ours = NearDedupParams.from_config(config).signature_config()
    theirs = ledger["config"].get("signature")
    if theirs != ours:
        differing = sorted(k for k in ours if (theirs or {}).get(k) != ours[k])
        raise ConfigError(f"near_dedup.against: {entry!r} was made with other signature settings "
                          f"({', '.join(differing)}: {[(theirs or {}).get(k) for k in differing]} vs ours "
                          f"{[ours[k] for k in differing]}); its band keys cannot match this config's")
    parts = ledger["outputs"][SIGNATURES]["parts"]
    return PreviousLayer(ledger["key"], path, tuple(join(path, SIGNATURES, p["name"]) for p in parts))


def build_stage(pipeline, config: NearDedupConfig, document_paths: list[str],
                previous: list[PreviousLayer], layer_path: str) -> dict:
    """The stage's job: read the layers, annotate, return the outputs by name.

    ``layer_path`` is the layer being built: the signing tasks write its
    ``signatures`` partitions and the LSH spill files (under ``_spill/``, which
    the driver deletes before the commit) themselves.
    """
    return pipeline | "NearDedup" >> AnnotateNearDuplicates(
        NearDedupParams.from_config(config), tuple(document_paths), tuple(previous), layer_path)


class AnnotateNearDuplicates(beam.PTransform):
    """pbegin -> {"annotations", "signatures" (WrittenPartitions), "large_clusters", "dead_letter"}.

    ``document_paths`` are the partitions of the ingest layer's documents
    (partition ``i`` holds the doc_ids with ``xxh3(doc_id) % n == i``);
    ``previous`` the earlier layers to dedup against.
    """

    def __init__(self, params: NearDedupParams, document_paths: tuple[str, ...],
                 previous: tuple[PreviousLayer, ...], layer_path: str):
        super().__init__()
        self._params = params
        self._documents = document_paths
        self._previous = previous
        self._layer_path = layer_path

    def expand(self, pbegin):
        params = self._params
        signatures_directory = join(self._layer_path, SIGNATURES)
        files = SignatureFiles((tuple(join(signatures_directory, part_name(i, len(self._documents)))
                                      for i in range(len(self._documents))),
                                *(layer.signature_paths for layer in self._previous)))
        spills = SpillDirectory(join(self._layer_path, SPILL), len(self._documents))
        side = []
        if params.lines:
            # The boilerplate count reads the text once more: it must be complete before any document is signed.
            boilerplate = pbegin | "BoilerplateLines" >> BoilerplateLines(
                self._documents, spills.directory, params.line_min_repeats, params.line_min_chars)
            side = [beam.pvalue.AsSingleton(boilerplate)]
        signed = (
            pbegin
            | "Partitions" >> PartitionIndexes(len(self._documents))
            | "SignSpillAndWrite" >> beam.ParDo(SignPartitionFn(params, self._documents, signatures_directory,
                                                                spills), *side)
            .with_output_types(IntKeyed).with_outputs(SIGNATURES, _BAND_SPILLS, _BLOCK_SPILLS, DEAD_LETTER, main=_MEMBERS)
        )
        spilled = {kind: [signed[kind]] for kind in (_BAND_SPILLS, _BLOCK_SPILLS)}
        if self._previous:
            paths = [path for layer in self._previous for path in layer.signature_paths]
            previous = (
                pbegin
                | "PreviousSignaturePaths" >> beam.Create(paths)
                | "SpreadPreviousPaths" >> beam.Reshuffle()
                | "SpillPrevious" >> beam.ParDo(SpillPreviousFn(params, spills)).with_outputs(
                    _BAND_SPILLS, _BLOCK_SPILLS))
            for kind in spilled:
                spilled[kind].append(previous[kind])

        found = {}  # finder -> {"edges": (a, b), "previous": (doc_id, previous-version member)}
        if params.use_minhash:
            found["minhash"] = (spilled[_BAND_SPILLS] | "AllBandSpills" >> beam.Flatten()
                                | "MinHashEdges" >> MinHashEdges(params, files, spills.directory))
        if params.use_simhash:
            found["simhash"] = (spilled[_BLOCK_SPILLS] | "AllBlockSpills" >> beam.Flatten()
                                | "SimHashEdges" >> SimHashEdges(params))
        labels = (
            {finder: edges["edges"] for finder, edges in found.items()}
            | "Components" >> ConnectedComponents(params.max_rounds, spills.directory, spills.buckets, STAGE)
        )
        # What the partition of a doc_id needs to annotate it, as (partition, spill file). Every per-document
        # collection is spilled by the step that makes it: a Flatten joins file names only.
        document_spills = [signed[_MEMBERS], labels]
        if self._previous:
            document_spills += [
                edges["previous"] | f"Spill{finder.title()}PreviousMembers" >> beam.ParDo(
                    SpillKeyedFn(spills.directory, spills.buckets, "previous"))
                for finder, edges in found.items()]
        if params.span_sources:
            document_spills.append(pbegin | "RepeatedSpans" >> RepeatedSpans(
                self._documents, params.span_sources, params.span_min_words, params.seed, spills.directory))
        clusters = (document_spills | "AllDocumentSpills" >> beam.Flatten()
                    | "Clusters" >> AssignClusters(params, files, spills, join(self._layer_path, ANNOTATIONS)))
        return {ANNOTATIONS: WrittenPartitions(clusters[ANNOTATIONS]), SIGNATURES: WrittenPartitions(signed[SIGNATURES]),
                LARGE_CLUSTERS: clusters[LARGE_CLUSTERS], DEAD_LETTER: signed[DEAD_LETTER]}


class MinHashEdges(beam.PTransform):
    """PCollection[(bucket, band spill file)] -> {"edges": verified (a, b), "previous": (doc_id, member)}.

    The spill files of a bucket meet at one task, which groups their records
    by band key and makes a star per band bucket; then each candidate pair is
    verified (unless ``verify: none``) against the signatures in ``files``.
    """

    def __init__(self, params: NearDedupParams, files: SignatureFiles, spill_directory: str):
        super().__init__()
        self._params = params
        self._files = files
        self._spill_directory = spill_directory

    def expand(self, spills):
        buckets = (
            spills
            | "GroupSpillsByBucket" >> GroupSpillFiles()
            | "StarCandidates" >> beam.ParDo(LshBucketFilesFn(MinHashBucketFn(), _band_entry)).with_outputs(
                _PREVIOUS, main="pairs")
        )
        edges = buckets["pairs"]
        if self._params.verify != "none":
            edges = (
                edges
                | "AsCandidatePairs" >> beam.Map(lambda e: (e[0], e[1], None))
                | "VerifyCandidates" >> VerifyPairs(self._files, self._spill_directory,
                                                    PairCheck(self._params, "minhash"), "candidate")
                | "KeepVerified" >> beam.FlatMap(lambda r: [(r[0], r[1])] if r[3] else []))
        return {"edges": edges, "previous": buckets[_PREVIOUS]}


class SimHashEdges(beam.PTransform):
    """PCollection[(bucket, block spill file)] -> {"edges": (a, b) within max_hamming bits,
    "previous": (doc_id, member)}: pairs of each block key's documents, as for MinHash."""

    def __init__(self, params: NearDedupParams):
        super().__init__()
        self._params = params

    def expand(self, spills):
        close = (
            spills
            | "GroupSpillsByBucket" >> GroupSpillFiles()
            | "ClosePairs" >> beam.ParDo(LshBucketFilesFn(SimHashBucketFn(self._params.max_hamming), _block_entry))
            .with_outputs(_PREVIOUS, main="pairs")
        )
        return {"edges": close["pairs"], "previous": close[_PREVIOUS]}


class AssignClusters(beam.PTransform):
    """PCollection[(partition, spill file of keyed records)]
    -> {"annotations": sidecars of the partitions written, "large_clusters": rows}.

    The spill files (:data:`~beam_pipeline.transforms.lsh_files.KEYED_RECORD`)
    hold, by the partition of their doc_id, what annotating a document needs:
    its ``member`` (written by the signing task), its cluster ``label``,
    ``previous``-version members and repeated ``span`` ranges. The runner
    groups file names only. One task per partition assembles its documents:
    those in no cluster get their annotation row, the others go to the bucket
    of their cluster label. One task per bucket chooses each cluster's
    representative; members of large clusters are verified against it
    (:class:`VerifyPairs`). The annotation rows go to the partition of their
    doc_id, and one task per partition writes it.
    """

    def __init__(self, params: NearDedupParams, files: SignatureFiles, spills: "SpillDirectory",
                 annotations_directory: str):
        super().__init__()
        self._params = params
        self._files = files
        self._spills = spills
        self._annotations = annotations_directory

    def expand(self, document_spills):
        spills, directory = self._spills, self._spills.directory
        assembled = (
            document_spills
            | "GroupSpillsByPartition" >> GroupSpillFiles()
            | "Assemble" >> beam.ParDo(AssemblePartitionFn(spills)).with_outputs(_ROWS, main=_CLUSTERED)
        )
        clusters = (
            assembled[_CLUSTERED]  # (bucket of the cluster label, spill file of (label, entry) records)
            | "GroupSpillsByClusterBucket" >> GroupSpillFiles()
            | "Representatives" >> beam.ParDo(ClusterBucketFn(self._params, spills)).with_outputs(
                LARGE_CLUSTERS, _CHECK, main=_ROWS)
        )
        checked = (
            clusters[_CHECK]  # (representative, member, carry)
            | "VerifyAgainstRepresentative" >> VerifyPairs(self._files, directory,
                                                            PairCheck(self._params, "any"), "large_cluster")
            | "LargeClusterRows" >> beam.ParDo(LargeMemberRowFn())
            | "SpillLargeClusterRows" >> SpillByPartition(directory, spills.buckets, NEAR_DEDUP, prefix="rows-large")
        )
        written = (
            (assembled[_ROWS], clusters[_ROWS], checked)
            | "AllAnnotationSpills" >> beam.Flatten()
            | "WriteAnnotations" >> WriteSpilledPartitions(self._annotations, spills.buckets, NEAR_DEDUP)
        )
        return {ANNOTATIONS: written, LARGE_CLUSTERS: clusters[LARGE_CLUSTERS]}


class VerifyPairs(beam.PTransform):
    """PCollection[(a, b, carry)] -> PCollection[(a, b, carry, ok)].

    ``b`` is a document of this corpus; ``a`` of this corpus or of an earlier
    version. Each pair is written to a spill file of the partition of ``a``'s
    signature in every layer of ``files`` (this corpus first); the task of
    that partition drops repeated pairs and attaches ``a``'s payload. Then the
    pair goes (again through a file) to the partition of ``b``'s signature,
    whose task takes ``a``'s payload from the first layer that has it and
    decides with ``check(payload_a, payload_b)``. Repeated (a, b, carry)
    triples are checked once; only file names go through the runner
    (:mod:`~beam_pipeline.transforms.lsh_files`).
    """

    def __init__(self, files: SignatureFiles, spill_directory: str, check, label: str):
        super().__init__()
        self._files = files
        self._spill_directory = spill_directory
        self._check = check
        self._label = label

    def expand(self, pairs):
        files, directory, prefix = self._files, self._spill_directory, f"pairs_{self._label}"
        return (
            pairs
            | "SpillByPartitionOfFirst" >> beam.ParDo(SpillPairsFn(files, directory, prefix))
            .with_output_types(IntKeyed)
            | "GroupByPartitionOfFirst" >> beam.GroupByKey()
            | "AttachFirst" >> beam.ParDo(AttachFirstFn(files, directory, f"{prefix}_attached"))
            .with_output_types(IntKeyed)
            | "GroupByPartitionOfSecond" >> beam.GroupByKey()
            | "Check" >> beam.ParDo(_CheckFn(files, self._check, self._label))
        )


# --- DoFns --------------------------------------------------------------------------

class SignPartitionFn(beam.DoFn):
    """partition index -> (index, spill file of its documents' members); tagged: the sidecar of its
    ``signatures`` partition (written here), (bucket, spill file) of its band and block keys, dead letters."""

    def __init__(self, params: NearDedupParams, document_paths: tuple[str, ...], signatures_directory: str,
                 spills: "SpillDirectory"):
        self._params = params
        self._documents = document_paths
        self._signatures = signatures_directory
        self._spills = spills

    def setup(self):
        self._counters = StageCounters(STAGE)
        self._boilerplate_source, self._boilerplate = None, None

    def process(self, index: int, boilerplate: tuple = ()) -> Iterator:
        if boilerplate is not self._boilerplate_source:
            self._boilerplate_source = boilerplate
            self._boilerplate = np.array(boilerplate, dtype=np.int64)
        count = len(self._documents)
        rows, members = [], []
        for document in read_partition_rows(self._documents[index], INPUT_COLUMNS):
            if bucket_of(document["doc_id"], count) != index:
                raise ValueError(f"{STAGE}: document {document['doc_id']} is in partition {index} of "
                                 f"{self._documents[index]}, but its doc_id belongs to partition "
                                 f"{bucket_of(document['doc_id'], count)} of {count}")
            self._counters.entered(document["source"])
            try:
                member, row = sign_document(document, self._params, self._boilerplate)
            except Exception as err:  # noqa: BLE001 - one bad document costs that document only
                self._counters.dead_letter(document.get("source"))
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_row(
                    STAGE, source=document.get("source"), doc_id=document.get("doc_id"),
                    error=f"{type(err).__name__}: {err}", raw_prefix=(document.get("text") or "").encode("utf-8")))
                continue
            self._counters.inc("signed" if row is not None else "unsigned_too_short")
            if member[_BOILERPLATE]:
                self._counters.inc("boilerplate_documents")
            members.append(keyed_record(member[_DOC_ID], "member", member))
            if row is not None:
                rows.append(row)
        yield beam.pvalue.TaggedOutput(SIGNATURES, write_layer_partition(
            self._signatures, index, count, rows, NEAR_SIGNATURE))
        yield from self._spills.write(rows, self._params, previous=False, prefix=f"new{index:05d}")
        if members:
            yield from write_keyed_spills({index: members}, self._spills.directory, "member")


class SpillPreviousFn(beam.DoFn):
    """A signature partition of an earlier version -> (bucket, spill file) of its band and block keys."""

    def __init__(self, params: NearDedupParams, spills: "SpillDirectory"):
        self._params = params
        self._spills = spills

    def process(self, path: str) -> Iterator:
        rows = list(read_partition_rows(path))
        yield from self._spills.write(rows, self._params, previous=True, prefix=f"old-{sha256_bytes(path.encode())[:16]}")


@dataclasses.dataclass(frozen=True)
class SpillDirectory:
    """Where the LSH spill files go, and into how many buckets their keys are split."""

    directory: str
    buckets: int

    def write(self, rows: list[dict], params: NearDedupParams, previous: bool, prefix: str) -> Iterator:
        """(bucket, path) of the band spill files (tagged ``band_spills``) and block spill files."""
        for kind, column, used in ((_BAND_SPILLS, "band_keys", params.use_minhash),
                                   (_BLOCK_SPILLS, "simhash_keys", params.use_simhash)):
            if used:
                for pair in spill_lsh_records(rows, column, previous, self.buckets, self.directory,
                                              f"{kind}-{prefix}"):
                    yield beam.pvalue.TaggedOutput(kind, pair)


class MinHashBucketFn(beam.DoFn):
    """(band key, [(doc_id, previous member or None)]) -> star edges (a, b) to the bucket's smallest doc_id.

    ``b`` is always a document of this corpus (its payload is in the second
    join); previous-version documents are never paired with each other.
    Previous-version members of buckets that hold a new document go to the
    ``previous`` output (their rank and date for the representative choice).
    """

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[int, Iterable[tuple]]) -> Iterator:
        new, old = _split_bucket(entry[:2] for entry in keyed[1])
        if not new:
            return
        ids = sorted(new | set(old))
        if len(ids) < 2:
            yield from _previous_members(old)
            return
        anchor, produced = ids[0], 0
        for other in ids[1:]:
            if other in new:
                yield anchor, other
            elif anchor in new:
                yield other, anchor
            else:
                continue
            produced += 1
        self._counters.inc("candidate_pairs", n=produced)
        yield from _previous_members(old)


class SimHashBucketFn(beam.DoFn):
    """(block key, [(doc_id, previous member or None, fingerprint)]) -> pairs within ``max_hamming`` bits."""

    def __init__(self, max_hamming: int):
        self._max_hamming = max_hamming

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[int, Iterable[tuple]]) -> Iterator:
        entries = list(keyed[1])
        new, old = _split_bucket((e[0], e[1]) for e in entries)
        if not new:
            return
        fingerprints = {e[0]: e[2] for e in entries}
        ids = sorted(fingerprints)
        used = set()
        for i, j in simhash.close_pairs([fingerprints[d] for d in ids], self._max_hamming):
            a, b = ids[i], ids[j]
            if a in new or b in new:
                used.update((a, b))
                self._counters.inc("simhash_pairs")
                yield a, b
        yield from _previous_members({d: m for d, m in old.items() if d in used})


class AssembleFn(beam.DoFn):
    """(doc_id, {member, previous, label, span}) -> a row (not clustered) or (label, entry) to cluster."""

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator:
        doc_id, parts = joined
        members = list(parts.get("member", ()))
        previous = list(parts.get("previous", ()))
        if members:
            member = members[0]
            if previous:  # the same document is in a previous version
                member = (0,) + member[1:]
        elif previous:  # (several buckets, or several earlier versions, may name it)
            member = min(previous, key=representative_order)
        else:  # spans of a document that was dead-lettered
            return
        new = bool(members)
        spans = tuple(merge_ranges(parts.get(SPAN, ())))
        if spans:
            self._counters.inc("span_documents")
        labels = list(parts.get("label", ()))
        if labels:
            yield min(labels), (member, new, spans)
        elif new:
            self._counters.passed(member[_SOURCE])
            if member[_PRIOR] == 0:
                self._counters.inc("previous_version_copies")
            yield beam.pvalue.TaggedOutput(_ROWS, annotation_row(member, None, 1, doc_id, member[_PRIOR] == 0,
                                                                 False, spans))


class ClusterFn(beam.DoFn):
    """(cluster label, [(member, new, spans)]) -> rows; large clusters: a report and pairs to verify."""

    def __init__(self, params: NearDedupParams):
        self._cap = params.max_cluster_size
        self._sample = params.sample_members
        self._seed = params.seed

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[str, Iterable[tuple]]) -> Iterator:
        label, entries = keyed
        entries = sorted(entries, key=lambda e: representative_order(e[0]))
        size = len(entries)
        representative = entries[0][0][_DOC_ID]
        large = size > self._cap
        self._counters.inc("large_clusters" if large else "clusters")
        if large:
            sample = sorted(sorted((e[0][_DOC_ID] for e in entries),
                                   key=lambda d: (stable_hash64(self._seed, "sample", d), d))[:self._sample])
            yield beam.pvalue.TaggedOutput(LARGE_CLUSTERS, {
                "doc_id": representative, "cluster_id": label, "size": size, "sampled_members": sample})
        for member, new, spans in entries:
            if not new:
                continue
            doc_id = member[_DOC_ID]
            in_previous = member[_PRIOR] == 0
            if large and doc_id != representative and not in_previous:
                yield beam.pvalue.TaggedOutput(_CHECK, (representative, doc_id, (member, spans, label, size)))
                continue
            duplicate = doc_id != representative or in_previous
            self._counters.passed(member[_SOURCE])
            self._counters.inc("clustered_documents")
            if duplicate:
                self._counters.inc("near_duplicates")
            yield annotation_row(member, label, size, representative, duplicate, large, spans)


class LargeMemberRowFn(beam.DoFn):
    """(representative, doc_id, (member, spans, label, size), verified) -> the member's row."""

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, checked: tuple) -> Iterator[dict]:
        representative, _doc_id, (member, spans, label, size), verified = checked
        self._counters.passed(member[_SOURCE])
        self._counters.inc("clustered_documents")
        if verified:
            self._counters.inc("near_duplicates")
        yield annotation_row(member, label, size, representative, verified, True, spans)


class AssemblePartitionFn(beam.DoFn):
    """(partition, spill files of its documents' members, labels, previous members and spans)
    -> (bucket of a cluster label, spill file of its clustered entries); tagged ``rows``:
    (partition, spill file of the annotation rows of its documents in no cluster)."""

    def __init__(self, spills: "SpillDirectory"):
        self._spills = spills

    def setup(self):
        self._assemble = AssembleFn()
        self._assemble.setup()

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator:
        index, paths = keyed
        count, directory = self._spills.buckets, self._spills.directory
        rows, entries = [], {}
        for doc_id, parts in read_keyed_groups(paths):
            if bucket_of(doc_id, count) != index:
                raise ValueError(f"{STAGE}: a record of document {doc_id} was spilled to partition {index}, "
                                 f"but its doc_id belongs to partition {bucket_of(doc_id, count)} of {count}")
            for out in self._assemble.process((doc_id, parts)):
                if isinstance(out, beam.pvalue.TaggedOutput):
                    rows.append(out.value)
                else:
                    label, entry = out
                    entries.setdefault(bucket_of(label, count), []).append(keyed_record(label, "entry", entry))
        for pair in write_partition_spills({index: rows} if rows else {}, directory, NEAR_DEDUP, "rows-single"):
            yield beam.pvalue.TaggedOutput(_ROWS, pair)
        yield from write_keyed_spills(entries, directory, f"entries-{index:05d}")


class ClusterBucketFn(beam.DoFn):
    """(bucket, spill files of clustered entries) -> (partition, spill file of annotation rows);
    tagged: large-cluster reports and pairs to verify against the representative (:class:`ClusterFn`)."""

    def __init__(self, params: NearDedupParams, spills: "SpillDirectory"):
        self._params = params
        self._spills = spills

    def setup(self):
        self._cluster = ClusterFn(self._params)
        self._cluster.setup()

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator:
        bucket, paths = keyed
        rows: dict[int, list[dict]] = {}
        for label, parts in read_keyed_groups(paths):
            for out in self._cluster.process((label, parts["entry"])):
                if isinstance(out, beam.pvalue.TaggedOutput):
                    yield out
                else:
                    rows.setdefault(bucket_of(out["doc_id"], self._spills.buckets), []).append(out)
        yield from write_partition_spills(rows, self._spills.directory, NEAR_DEDUP, f"rows-clustered-{bucket:05d}")


class _CheckFn(beam.DoFn):
    """(partition of b, spill files of attached pairs) -> (a, b, carry, ok) per distinct pair."""

    def __init__(self, files: SignatureFiles, check, label: str):
        self._files = files
        self._check = check
        self._label = label

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple]:
        partition, paths = keyed
        unknown = len(self._files.layers)
        first: dict[tuple, tuple] = {}  # (a, b, carry) -> (layer, payload): the first layer that has a
        for row in read_pair_spills(paths):
            pair = (row["a"], row["b"], row["carry"])
            layer = unknown if row["layer"] is None else row["layer"]
            if pair not in first or layer < first[pair][0]:
                first[pair] = (layer, (row["minhash"], row["simhash"], row["shingles"]))
        payloads = self._files.payloads(0, partition, {b for _, b, _ in first})
        for (a, b, carry), (layer, payload_a) in sorted(first.items()):
            if layer == unknown:
                raise ValueError(f"{STAGE}: no signature for document {a} of a pair to verify")
            if b not in payloads:
                raise ValueError(f"{STAGE}: no signature for document {b} of a pair to verify")
            ok = self._check(payload_a, payloads[b])
            self._counters.inc(f"{self._label}_{'verified' if ok else 'rejected'}")
            yield a, b, decode_carry(carry), ok


# --- pure functions -------------------------------------------------------------------

# A member is a plain tuple (cheap to encode); the first seven fields are the representative order.
_PRIOR, _RANK, _NO_QUALITY, _NEG_QUALITY, _NO_DATE, _DATE, _DOC_ID, _SOURCE, _SIGNED, _BOILERPLATE = range(10)


def member_of(document: dict, *, signed: bool = True, boilerplate: tuple = (), previous: bool = False,
              quality: float | None = None) -> tuple:
    """The fields of a document the representative choice and its annotation need."""
    return (0 if previous else 1, document["source_rank"], quality is None, -(quality or 0.0),
            document["date"] is None, document["date"] or "", document["doc_id"], document["source"],
            signed, boilerplate)


def representative_order(member: tuple) -> tuple:
    """Total order; the minimum is the representative: documents of a previous version first,
    then source rank, then higher quality (when known; no scorer sets it yet), then the earliest
    date (missing last), then doc_id."""
    return member[:_SOURCE]


def sign_document(document: dict, params: NearDedupParams, boilerplate: np.ndarray | None = None
                  ) -> tuple[tuple, dict | None]:
    """(member, signature row or None): the per-document work of the stage, without Beam.

    Boilerplate lines (``lines-v1`` keys in the sorted int64 array
    ``boilerplate``) are left out of the shingles, so documents that share
    only a footer do not look alike.
    """
    text = document["text"]
    present: tuple = ()
    if boilerplate is not None and boilerplate.size:
        keys = line_keys(text)[0]
        marked = np.isin(keys, boilerplate)
        if marked.any():
            present = tuple(sorted(set(keys[marked].tolist())))
            text = "\n".join(itertools.compress(text.split("\n"), (~marked).tolist()))
    shingles = shingle_hashes(text, kind=params.shingle_kind, size=params.shingle_size, seed=params.seed)
    member = member_of(document, signed=shingles is not None, boilerplate=present)
    if shingles is None:
        return member, None
    row = {"doc_id": document["doc_id"], "source": document["source"], "source_rank": document["source_rank"],
           "date": document["date"], "minhash": None, "band_keys": [], "simhash": None, "simhash_keys": [],
           "shingles": None}
    if params.use_minhash:
        sig = minhash.signature(shingles, params.num_perm, params.seed)
        row["minhash"] = minhash.to_bytes(sig)
        row["band_keys"] = minhash.band_keys(sig, params.bands, params.rows, params.seed)
    if params.use_simhash:
        fingerprint = simhash.fingerprint(shingles)
        row["simhash"] = fingerprint
        row["simhash_keys"] = simhash.block_keys(fingerprint, params.max_hamming, params.blocks, params.seed)
    if params.verify == "jaccard":
        row["shingles"] = np.unique(shingles).astype("<u8").tobytes()
    return member, row


def annotation_row(member: tuple, cluster_id: str | None, size: int, representative: str, duplicate: bool,
                   large: bool, spans: list[tuple[int, int]]) -> dict:
    return {"doc_id": member[_DOC_ID], "signed": member[_SIGNED], "cluster_id": cluster_id,
            "cluster_size": size, "representative": representative, "is_duplicate": duplicate,
            "large_cluster": large, "boilerplate_lines": list(member[_BOILERPLATE]),
            "repeated_spans": [{"start": s, "end": e} for s, e in spans]}


class PairCheck:
    """Is a candidate pair a near duplicate? ``criteria``: ``minhash`` (LSH candidates) or ``any``.

    MinHash: estimated Jaccard from the signatures (``verify: signature``) or
    true Jaccard of the shingle sets (``verify: jaccard``) at least
    ``verify_threshold``; SimHash: Hamming distance at most ``max_hamming``.
    """

    def __init__(self, params: NearDedupParams, criteria: str):
        self._jaccard = params.verify == "jaccard"
        self._threshold = params.verify_threshold
        self._max_hamming = params.max_hamming
        self._simhash = criteria == "any"

    def __call__(self, a: tuple, b: tuple) -> bool:
        minhash_a, simhash_a, shingles_a = a
        minhash_b, simhash_b, shingles_b = b
        if minhash_a is not None and minhash_b is not None:
            if self._jaccard and shingles_a is not None and shingles_b is not None:
                similarity = _sorted_jaccard(shingles_a, shingles_b)
            else:
                similarity = minhash.estimate_jaccard(minhash.from_bytes(minhash_a), minhash.from_bytes(minhash_b))
            if similarity >= self._threshold:
                return True
        if self._simhash and simhash_a is not None and simhash_b is not None:
            return simhash.hamming(simhash_a, simhash_b) <= self._max_hamming
        return False


def _sorted_jaccard(a: bytes, b: bytes) -> float:
    x, y = np.frombuffer(a, dtype="<u8"), np.frombuffer(b, dtype="<u8")
    common = np.intersect1d(x, y, assume_unique=True).size
    union = x.size + y.size - common
    return common / union if union else 1.0


def _band_entry(record: dict) -> tuple[str, tuple | None]:
    """A spilled band record -> a MinHash bucket entry: (doc_id, previous-version member or None)."""
    return record["doc_id"], member_of(record, previous=True) if record["previous"] else None


def _block_entry(record: dict) -> tuple[str, tuple | None, int]:
    """A spilled block record -> a SimHash bucket entry: (doc_id, member or None, fingerprint)."""
    return (*_band_entry(record), record["simhash"])


def _split_bucket(entries: Iterable[tuple[str, tuple | None]]) -> tuple[set, dict]:
    """(doc_ids of this corpus, {doc_id: member} of previous versions) of one bucket."""
    new, old = set(), {}
    for doc_id, previous_member in entries:
        if previous_member is None:
            new.add(doc_id)
        else:
            old[doc_id] = previous_member
    return new, old


def _previous_members(old: dict) -> Iterator:
    for doc_id, member in sorted(old.items()):
        yield beam.pvalue.TaggedOutput(_PREVIOUS, (doc_id, member))
