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

    documents --SignDocuments--> members (doc_id, order tuple)   signatures (band keys, simhash keys)
      |    (BoilerplateLines: side input)   |                      |  (+ previous versions' signatures)
      |                                     |   MinHashEdges: GroupByKey(band key) -> star edges
      |                                     |                 -> VerifyPairs (2 joins on doc_id)
      |                                     |   SimHashEdges: GroupByKey(block key) -> pairs <= k bits
      |                                     |                      |
      |                                     |   ConnectedComponents (large-star/small-star rounds)
      |                                     v                      v
      +--RepeatedSpans--> AssignClusters: CoGroupByKey(doc_id) member + label + spans
                                |  -> documents in no cluster: annotation rows
                     GroupByKey(cluster label) -> representative = min(previous version first,
                                |     source rank, -quality, date (missing last), doc_id)
                                +-- size <= max_cluster_size: every other member is a duplicate
                                +-- larger: reported; a member is a duplicate only if it
                                    verifies against the representative itself (VerifyPairs)

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
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.dedup import minhash

from beam_pipeline.dedup import simhash
from beam_pipeline.accounting import CountEntering, StageCounters
from beam_pipeline.dedup.components import labels_from_stars, large_star, small_star
from beam_pipeline.config import ConfigError, NearDedupConfig
from beam_pipeline.hashing import stable_hash64
from beam_pipeline.layers import join, read_bytes
from beam_pipeline.dedup.repetition import LINES_VERSION, SPANS_VERSION, line_keys, merge_ranges
from beam_pipeline.schemas import LARGE_CLUSTER, NEAR_DEDUP, NEAR_SIGNATURE, dead_letter_row
from beam_pipeline.dedup.shingling import NORMALIZATION_VERSION, shingle_hashes
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.transforms.layer_io import ReadLayerOutput
from beam_pipeline.transforms.line_dedup import BoilerplateLines, RepeatedSpans

STAGE = "near_dedup"
VERSION = "1"
ANNOTATIONS, SIGNATURES, LARGE_CLUSTERS, DEAD_LETTER = "annotations", "signatures", "large_clusters", "dead_letter"
OUTPUTS = {ANNOTATIONS: NEAR_DEDUP, SIGNATURES: NEAR_SIGNATURE, LARGE_CLUSTERS: LARGE_CLUSTER}
INPUT_COLUMNS = ["doc_id", "source", "source_rank", "date", "text"]

_MEMBERS, _PREVIOUS, _CLUSTERED, _CHECK, _CHANGES, _ROWS = "members", "previous", "clustered", "check", "changes", "rows"
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
                previous: list[PreviousLayer]) -> dict:
    """The stage's job: read the layers, annotate, return the outputs by name."""
    inputs = {"documents": pipeline | "ReadDocuments" >> ReadLayerOutput(document_paths, INPUT_COLUMNS)}
    if config.lines.enabled:
        # A second read of the text for the boilerplate count, so that signing stays fused with
        # its own read: the documents then never wait in the runner between two steps (the local
        # runner lost chunks of such a hand-over at 0.5-1 GB; docs/decisions.md).
        inputs["line_documents"] = pipeline | "ReadTextForLines" >> ReadLayerOutput(document_paths, ["text"])
    if previous:
        paths = [p for layer in previous for p in layer.signature_paths]
        inputs["previous"] = pipeline | "ReadPreviousSignatures" >> ReadLayerOutput(paths)
    return inputs | "NearDedup" >> AnnotateNearDuplicates(NearDedupParams.from_config(config))


class AnnotateNearDuplicates(beam.PTransform):
    """{"documents": PCollection[document], "previous": PCollection[signature row] (optional)}
    -> {"annotations", "signatures", "large_clusters", "dead_letter"}."""

    def __init__(self, params: NearDedupParams):
        super().__init__()
        self._params = params

    def expand(self, inputs):
        params = self._params
        documents = inputs["documents"] | "Count" >> CountEntering(STAGE)
        signed = documents | "Sign" >> SignDocuments(params, inputs.get("line_documents"))
        signatures = signed[SIGNATURES]
        previous = inputs.get("previous")
        # (doc_id, (minhash bytes, simhash, shingle bytes)): of this corpus, and of this corpus + previous versions
        payloads_new = signatures | "PayloadsNew" >> beam.Map(_keyed_payload).with_output_types(StrKeyed)
        payloads_all = payloads_new
        if previous is not None:
            payloads_all = (
                (payloads_new, previous | "PayloadsPrevious" >> beam.Map(_keyed_payload).with_output_types(StrKeyed))
                | "PayloadsAll" >> beam.Flatten())
        indexed = {"signatures": signatures, **({"previous": previous} if previous is not None else {})}

        found = []  # {"edges": (a, b), "previous": (doc_id, previous-version member)} per method
        if params.use_minhash:
            found.append(indexed | "MinHashEdges" >> MinHashEdges(params, payloads_all, payloads_new))
        if params.use_simhash:
            found.append(indexed | "SimHashEdges" >> SimHashEdges(params))
        labels = (
            [f["edges"] for f in found]
            | "AllEdges" >> beam.Flatten()
            | "Components" >> ConnectedComponents(params.max_rounds)
        )
        parts = {"member": signed[_MEMBERS], "label": labels}
        if previous is not None:
            parts["previous"] = ([f["previous"] for f in found] | "AllPreviousMembers" >> beam.Flatten()
                                 | "KeyPreviousMembers" >> beam.Map(lambda kv: kv).with_output_types(StrKeyed))
        if params.span_sources:
            sources = set(params.span_sources)
            parts["span"] = (
                documents
                | "HighRiskSources" >> beam.Filter(lambda d: d["source"] in sources)
                | "RepeatedSpans" >> RepeatedSpans(params.span_min_words, params.seed))
        clusters = parts | "Clusters" >> AssignClusters(params, payloads_all, payloads_new)
        return {ANNOTATIONS: clusters[ANNOTATIONS], SIGNATURES: signatures,
                LARGE_CLUSTERS: clusters[LARGE_CLUSTERS], DEAD_LETTER: signed[DEAD_LETTER]}


class SignDocuments(beam.PTransform):
    """PCollection[document] -> {"members": (doc_id, member), "signatures": rows, "dead_letter": rows}.

    With line dedup on, the corpus-wide boilerplate lines are computed first
    (from ``line_documents`` when given: the same documents, read separately)
    and reach the signing step as a side input.
    """

    def __init__(self, params: NearDedupParams, line_documents=None):
        super().__init__()
        self._params = params
        self._line_documents = line_documents

    def expand(self, documents):
        params = self._params
        side = []
        if params.lines:
            counted = self._line_documents if self._line_documents is not None else documents
            boilerplate = counted | "BoilerplateLines" >> BoilerplateLines(params.line_min_repeats,
                                                                          params.line_min_chars)
            side = [beam.pvalue.AsSingleton(boilerplate)]
        return documents | "SignFn" >> beam.ParDo(SignFn(params), *side).with_output_types(StrKeyed).with_outputs(
            SIGNATURES, DEAD_LETTER, main=_MEMBERS)


class MinHashEdges(beam.PTransform):
    """{"signatures", "previous"?} -> {"edges": verified (a, b), "previous": (doc_id, member)}.

    ``GroupByKey`` on band keys, a star per bucket, then each candidate pair
    verified (unless ``verify: none``).
    """

    def __init__(self, params: NearDedupParams, payloads_all, payloads_new):
        super().__init__()
        self._params = params
        self._payloads_all = payloads_all
        self._payloads_new = payloads_new

    def expand(self, indexed):
        records = [indexed["signatures"] | "BandRecords" >> beam.FlatMap(_band_records, False)
                   .with_output_types(IntKeyed)]
        if "previous" in indexed:
            records.append(indexed["previous"] | "PreviousBandRecords" >> beam.FlatMap(_band_records, True)
                           .with_output_types(IntKeyed))
        buckets = (
            records
            | "AllBandRecords" >> beam.Flatten()
            | "GroupByBand" >> beam.GroupByKey()
            | "StarCandidates" >> beam.ParDo(MinHashBucketFn()).with_outputs(_PREVIOUS, main="pairs")
        )
        edges = buckets["pairs"]
        if self._params.verify != "none":
            edges = (
                edges
                | "AsCandidatePairs" >> beam.Map(lambda e: (e[0], e[1], None))
                | "VerifyCandidates" >> VerifyPairs(self._payloads_all, self._payloads_new,
                                                    PairCheck(self._params, "minhash"), "candidate")
                | "KeepVerified" >> beam.FlatMap(lambda r: [(r[0], r[1])] if r[3] else []))
        return {"edges": edges, "previous": buckets[_PREVIOUS]}


class SimHashEdges(beam.PTransform):
    """{"signatures", "previous"?} -> {"edges": (a, b) within max_hamming bits, "previous": (doc_id, member)}."""

    def __init__(self, params: NearDedupParams):
        super().__init__()
        self._params = params

    def expand(self, indexed):
        records = [indexed["signatures"] | "BlockRecords" >> beam.FlatMap(_block_records, False)
                   .with_output_types(IntKeyed)]
        if "previous" in indexed:
            records.append(indexed["previous"] | "PreviousBlockRecords" >> beam.FlatMap(_block_records, True)
                           .with_output_types(IntKeyed))
        close = (
            records
            | "AllBlockRecords" >> beam.Flatten()
            | "GroupByBlock" >> beam.GroupByKey()
            | "ClosePairs" >> beam.ParDo(SimHashBucketFn(self._params.max_hamming)).with_outputs(
                _PREVIOUS, main="pairs")
        )
        return {"edges": close["pairs"], "previous": close[_PREVIOUS]}


class AssignClusters(beam.PTransform):
    """{"member", "label", "previous"?, "span"?} keyed by doc_id -> {"annotations", "large_clusters"}.

    Documents without a label are annotated at the join; the others meet
    their cluster at one ``GroupByKey`` on the label, where the representative
    is chosen; members of large clusters are verified against it.
    """

    def __init__(self, params: NearDedupParams, payloads_all, payloads_new):
        super().__init__()
        self._params = params
        self._payloads_all = payloads_all
        self._payloads_new = payloads_new

    def expand(self, parts):
        assembled = (
            parts
            | "JoinOnDocId" >> beam.CoGroupByKey()
            | "Assemble" >> beam.ParDo(AssembleFn()).with_output_types(StrKeyed).with_outputs(
                _ROWS, main=_CLUSTERED)
        )
        clusters = (
            assembled[_CLUSTERED]  # (cluster label, (member, in this corpus, spans))
            | "GroupByCluster" >> beam.GroupByKey()
            | "Representatives" >> beam.ParDo(ClusterFn(self._params)).with_outputs(
                LARGE_CLUSTERS, _CHECK, main=_ROWS)
        )
        checked = (
            clusters[_CHECK]  # (representative, member, carry)
            | "VerifyAgainstRepresentative" >> VerifyPairs(self._payloads_all, self._payloads_new,
                                                            PairCheck(self._params, "any"), "large_cluster")
            | "LargeClusterRows" >> beam.ParDo(LargeMemberRowFn())
        )
        annotations = (assembled[_ROWS], clusters[_ROWS], checked) | "AllAnnotations" >> beam.Flatten()
        return {ANNOTATIONS: annotations, LARGE_CLUSTERS: clusters[LARGE_CLUSTERS]}


class VerifyPairs(beam.PTransform):
    """PCollection[(a, b, carry)] -> PCollection[(a, b, carry, ok)].

    Two joins on doc_id: the first attaches ``a``'s payload (from
    ``payloads_a``: this corpus and previous versions), the second ``b``'s
    (from ``payloads_b``: this corpus), then ``check(payload_a, payload_b)``
    decides. Repeated (a, b, carry) triples are checked once.
    """

    def __init__(self, payloads_a, payloads_b, check, label: str):
        super().__init__()
        self._payloads_a = payloads_a
        self._payloads_b = payloads_b
        self._check = check
        self._label = label

    def expand(self, pairs):
        with_a = (
            {"pairs": pairs | "KeyByFirst" >> beam.Map(lambda t: (t[0], (t[1], t[2]))).with_output_types(StrKeyed),
             "payload": self._payloads_a}
            | "JoinFirst" >> beam.CoGroupByKey()
            | "AttachFirst" >> beam.FlatMap(_attach_first).with_output_types(StrKeyed)
        )
        return (
            {"pairs": with_a, "payload": self._payloads_b}
            | "JoinSecond" >> beam.CoGroupByKey()
            | "Check" >> beam.ParDo(_CheckFn(self._check, self._label))
        )


class ConnectedComponents(beam.PTransform):
    """PCollection[(a, b)] edges -> PCollection[(node, label)], label = smallest node of the component.

    ``max_rounds`` large-star + small-star rounds (:mod:`beam_pipeline.dedup.components`)
    are unrolled in the job graph (``docs/near_dedup.md`` says why not one job
    per round). Each round also yields its changed-edge count as a few partial
    sums (one per bundle); the next round reads them as a side input and, once
    they sum to 0 (converged), passes the edges through without grouping them,
    so rounds after convergence cost one pass over the final stars. If the last
    round still changed edges, the job fails with a message naming
    ``near_dedup.max_rounds``. Counters: ``components_rounds`` (rounds that
    ran) and ``components_changed_rNN`` (edges changed in round NN).
    """

    def __init__(self, max_rounds: int):
        super().__init__()
        self._max_rounds = max_rounds

    def expand(self, edges):
        current = edges | "Canonical" >> beam.FlatMap(lambda e: [(min(e), max(e))] if e[0] != e[1] else [])
        changes = []
        for index in range(1, self._max_rounds + 1):
            result = current | f"Round{index:02d}" >> _StarRound(index, changes[-1] if changes else None)
            current = result["edges"]
            changes.append(result["changes"])
        _ = (edges.pipeline
             | "Once" >> beam.Create([None])
             | "CheckConverged" >> beam.ParDo(_ConvergedFn(self._max_rounds),
                                              *[beam.pvalue.AsList(c) for c in changes]))
        return current | "Labels" >> beam.FlatMap(lambda edge: labels_from_stars([edge])).with_output_types(StrKeyed)


class _StarRound(beam.PTransform):
    """Edges (small, large) -> {"edges": after large-star + small-star, "changes": partial counts}."""

    def __init__(self, index: int, previous_changes):
        super().__init__()
        self._index = index
        self._previous = previous_changes

    def expand(self, edges):
        if self._previous is None:
            work, done = edges, None
        else:
            routed = edges | "SkipIfConverged" >> beam.ParDo(
                _RouteFn(), beam.pvalue.AsList(self._previous)).with_outputs("done", main="work")
            work, done = routed["work"], routed["done"]
        large = (
            work
            | "BothDirections" >> beam.FlatMap(lambda e: [(e[0], e[1]), (e[1], e[0])]).with_output_types(StrKeyed)
            | "GroupNeighbours" >> beam.GroupByKey()
            | "LargeStar" >> beam.ParDo(_StarFn(large_star, self._index)).with_output_types(StrKeyed)
            .with_outputs(_CHANGES, main="edges")
        )
        small = (
            large["edges"]  # (larger, smaller): keyed by the larger end
            | "GroupSmallerNeighbours" >> beam.GroupByKey()
            | "SmallStar" >> beam.ParDo(_StarFn(small_star, self._index)).with_outputs(_CHANGES, main="edges")
        )
        changes = (large[_CHANGES], small[_CHANGES]) | "AllChanges" >> beam.Flatten()
        out = small["edges"] if done is None else (small["edges"], done) | "WithSkipped" >> beam.Flatten()
        return {"edges": out, "changes": changes}


# --- DoFns --------------------------------------------------------------------------

class SignFn(beam.DoFn):
    """document -> (doc_id, member) and, when it has shingles, a ``signatures`` row."""

    def __init__(self, params: NearDedupParams):
        self._params = params

    def setup(self):
        self._counters = StageCounters(STAGE)
        self._boilerplate_source, self._boilerplate = None, None

    def process(self, document: dict, boilerplate: tuple = ()) -> Iterator:
        if boilerplate is not self._boilerplate_source:
            self._boilerplate_source = boilerplate
            self._boilerplate = np.array(boilerplate, dtype=np.int64)
        try:
            member, row = sign_document(document, self._params, self._boilerplate)
        except Exception as err:  # noqa: BLE001 - one bad document costs that document only
            self._counters.dead_letter(document.get("source"))
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_row(
                STAGE, source=document.get("source"), doc_id=document.get("doc_id"),
                error=f"{type(err).__name__}: {err}", raw_prefix=(document.get("text") or "").encode("utf-8")))
            return
        self._counters.inc("signed" if row is not None else "unsigned_too_short")
        if member[_BOILERPLATE]:
            self._counters.inc("boilerplate_documents")
        yield member[_DOC_ID], member
        if row is not None:
            yield beam.pvalue.TaggedOutput(SIGNATURES, row)


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
        members = list(parts["member"])
        previous = list(parts.get("previous", ()))
        if members:
            member = members[0]
            if previous:  # the same document is in a previous version
                member = (0,) + member[1:]
        elif previous:
            member = previous[0]
        else:  # spans of a document that was dead-lettered
            return
        new = bool(members)
        spans = tuple(merge_ranges(parts.get("span", ())))
        if spans:
            self._counters.inc("span_documents")
        labels = list(parts["label"])
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


class _CheckFn(beam.DoFn):
    def __init__(self, check, label: str):
        self._check = check
        self._label = label

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator[tuple]:
        b, parts = joined
        payloads = list(parts["payload"])
        pairs = list(parts["pairs"])
        if not pairs:
            return
        if not payloads:
            raise ValueError(f"{STAGE}: no signature for document {b} of a pair to verify")
        for a, carry, payload_a in pairs:
            ok = self._check(payload_a, payloads[0])
            self._counters.inc(f"{self._label}_{'verified' if ok else 'rejected'}")
            yield a, b, carry, ok


class _RouteFn(beam.DoFn):
    def process(self, edge, previous_changes: list[int]):
        if sum(previous_changes) == 0:
            yield beam.pvalue.TaggedOutput("done", edge)
        else:
            yield edge


class _StarFn(beam.DoFn):
    """One large-star or small-star step per node; changed-edge counts leave once per bundle."""

    def __init__(self, step, index: int):
        self._step = step
        self._index = index

    def setup(self):
        self._counters = StageCounters(STAGE)

    def start_bundle(self):
        self._changed = 0

    def process(self, keyed: tuple[str, Iterable[str]]):
        edges, changed = self._step(keyed[0], keyed[1])
        self._changed += changed
        yield from edges

    def finish_bundle(self):
        if self._changed:
            self._counters.inc(f"components_changed_r{self._index:02d}", n=self._changed)
            yield beam.pvalue.TaggedOutput(_CHANGES, WindowedValue(self._changed, MIN_TIMESTAMP, [GlobalWindow()]))


class _ConvergedFn(beam.DoFn):
    """Counts the rounds that ran; fails the job if the last round still changed edges."""

    def __init__(self, max_rounds: int):
        self._max_rounds = max_rounds

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, _unused, *changes_per_round: list[int]):
        totals = [sum(c) for c in changes_per_round]
        self._counters.inc("components_rounds", n=1 + sum(1 for t in totals[:-1] if t))
        if totals[-1]:
            raise RuntimeError(
                f"{STAGE}: connected components did not converge within near_dedup.max_rounds="
                f"{self._max_rounds} rounds ({totals[-1]} edges still changed in the last round); "
                f"raise near_dedup.max_rounds")
        yield from ()


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


def _keyed_payload(row: dict) -> tuple[str, tuple]:
    return row["doc_id"], (row["minhash"], row["simhash"], row["shingles"])


def _band_records(row: dict, previous: bool) -> Iterator[tuple[int, tuple]]:
    value = (row["doc_id"], member_of(row, previous=True) if previous else None)
    for key in row["band_keys"]:
        yield key, value


def _block_records(row: dict, previous: bool) -> Iterator[tuple[int, tuple]]:
    value = (row["doc_id"], member_of(row, previous=True) if previous else None, row["simhash"])
    for key in row["simhash_keys"]:
        yield key, value


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


def _attach_first(joined: tuple[str, dict]) -> Iterator[tuple[str, tuple]]:
    a, parts = joined
    payloads = list(parts["payload"])
    pairs = list(parts["pairs"])
    if not pairs:
        return
    if not payloads:
        raise ValueError(f"{STAGE}: no signature for document {a} of a pair to verify")
    seen = set()
    for b, carry in pairs:
        if (b, carry) in seen:
            continue
        seen.add((b, carry))
        yield b, (a, carry, payloads[0])
