"""Signing in the near-dedup stage: one task per document partition signs its documents and writes
its ``signatures`` partition.

:func:`sign_document` is the per-document work without Beam: a member
(:func:`~beam_pipeline.transforms.near_dedup_clusters.member_of`) and a
signature row (MinHash signature and band keys, SimHash and block keys, the
shingle count and set) of the text without its boilerplate lines and, mostly,
its template lines (:func:`signature_text`). :class:`SignPartitionFn` runs it
over a partition and hands the members, payloads and LSH keys on in blocks
(:mod:`beam_pipeline.transforms.near_dedup_blocks`); :class:`PreviousSignaturesFn`
hands on those of an earlier version's signature partitions
(``near_dedup.against``). ``docs/near_dedup.md``, "Shingles", "MinHash",
"Boilerplate lines".
"""

from __future__ import annotations

import itertools
from typing import Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.dedup import minhash, simhash
from beam_pipeline.dedup.repetition import line_keys
from beam_pipeline.dedup.shingling import distinct as distinct_shingles
from beam_pipeline.dedup.shingling import shingle_hashes
from beam_pipeline.records.accounting import Tally
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.storage.layers import read_partition_rows
from beam_pipeline.storage.schemas import NEAR_SIGNATURE, dead_letter_row
from beam_pipeline.transforms.bundle_budget import WHOLE_ELEMENTS, BudgetedExpandFn, BundleBudget
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.layer_io import write_layer_partition
from beam_pipeline.transforms.line_dedup import in_sorted
from beam_pipeline.transforms.near_dedup_blocks import LshKeyBlocks, add_payload, doc_blocks, payload_of, shingles_apart
from beam_pipeline.transforms.near_dedup_clusters import BOILERPLATE, member_of
from beam_pipeline.transforms.near_dedup_params import (
    DEAD_LETTER,
    PAYLOADS,
    SHINGLES,
    SIGNATURES,
    STAGE,
    NearDedupParams,
)

INPUT_COLUMNS = ["doc_id", "source", "source_rank", "date", "text"]


class SignPartitionFn(BudgetedExpandFn):
    """partition index -> blocks of (doc_id, member) per doc group; tagged: the sidecar of its ``signatures``
    partition (written here), blocks of (doc_id, 0, payload) per doc group and blocks of the band
    and block keys of the signed documents (:class:`LshKeyBlocks`), dead letters, and the
    partition's tally. A bundle stops taking partitions once it has emitted ``budget`` bytes
    (:mod:`beam_pipeline.transforms.bundle_budget`)."""

    def __init__(
        self,
        params: NearDedupParams,
        documents: DocumentPartitions,
        signatures_directory: str,
        key_groups: int,
        budget: BundleBudget,
    ):
        super().__init__(budget)
        self._params = params
        self._documents = documents
        self._signatures = signatures_directory
        self._key_groups = key_groups

    def setup(self):
        self.tally = Tally(STAGE)
        self._lines_source, self._boilerplate, self._signature_lines = None, None, None

    # (the side input comes before the tracker: an override of the base class's process(element, tracker))
    def process(self, index: int, lines: tuple = ((), ()), tracker=WHOLE_ELEMENTS) -> Iterator:  # type: ignore[override]
        if lines is not self._lines_source:
            self._lines_source = lines
            self._boilerplate, self._signature_lines = (np.array(keys, dtype=np.int64) for keys in lines)
        yield from super().process(index, tracker)

    def items(self, index: int, start: int) -> Iterator:
        params, count, tally = self._params, self._documents.count, self.tally
        tally.discard()  # what an attempt that failed on this instance counted is not this element's
        rows, members, payloads, shingle_sets = [], [], [], []
        keys, apart = LshKeyBlocks(params, self._key_groups), shingles_apart(params)
        for document in self._documents.rows(
            index, INPUT_COLUMNS, tally, where=f"{STAGE} gate", annotation=params.quality
        ):
            doc_id = document["doc_id"]
            if bucket_of(doc_id, count) != index:
                raise ValueError(
                    f"{STAGE}: document {doc_id} is in partition {index} of "
                    f"{self._documents.paths[index]}, but its doc_id belongs to partition "
                    f"{bucket_of(doc_id, count)} of {count}"
                )
            tally.entered(document["source"])
            try:
                member, row = sign_document(document, params, self._boilerplate, self._signature_lines)
            except Exception as err:  # noqa: BLE001 - one bad document costs that document only
                tally.dead_letter(document.get("source"))
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER,
                    dead_letter_row(
                        STAGE,
                        source=document.get("source"),
                        doc_id=doc_id,
                        error=f"{type(err).__name__}: {err}",
                        raw_prefix=(document.get("text") or "").encode("utf-8"),
                    ),
                )
                continue
            tally.inc("signed" if row is not None else "unsigned_too_short")
            if member[BOILERPLATE]:
                tally.inc("boilerplate_documents")
            members.append((doc_id, member))
            if row is None:
                continue
            rows.append(row)
            add_payload(payloads, shingle_sets, doc_id, 0, payload_of(row), apart)
            keys.add(row, None)
        yield from doc_blocks(members, self._key_groups)
        for block in doc_blocks(payloads, self._key_groups):
            yield beam.pvalue.TaggedOutput(PAYLOADS, block)
        for block in doc_blocks(shingle_sets, self._key_groups):
            yield beam.pvalue.TaggedOutput(SHINGLES, block)
        yield from keys.tagged()
        yield beam.pvalue.TaggedOutput(
            SIGNATURES, write_layer_partition(self._signatures, index, count, rows, NEAR_SIGNATURE)
        )

    def settle(self) -> Iterator:
        return self.tally.tagged()


class PreviousSignaturesFn(BudgetedExpandFn):
    """(layer index, a signature partition of an earlier version) -> blocks of (doc_id, layer, payload) per
    doc group; tagged: blocks of (doc_id, layer, shingle set) per doc group (``shingles_apart``), and blocks
    of its band and block keys, with each document's member (it competes as a previous version). A
    bundle stops taking partitions once it has emitted ``budget`` bytes."""

    def __init__(self, params: NearDedupParams, key_groups: int, budget: BundleBudget):
        super().__init__(budget)
        self._params = params
        self._key_groups = key_groups

    def items(self, entry: tuple[int, str], start: int) -> Iterator:
        layer, path = entry
        payloads, shingle_sets, keys = [], [], LshKeyBlocks(self._params, self._key_groups)
        apart = shingles_apart(self._params)
        for row in read_partition_rows(path):
            add_payload(payloads, shingle_sets, row["doc_id"], layer, payload_of(row), apart)
            keys.add(row, member_of(row, previous=True))
        yield from doc_blocks(payloads, self._key_groups)
        for block in doc_blocks(shingle_sets, self._key_groups):
            yield beam.pvalue.TaggedOutput(SHINGLES, block)
        yield from keys.tagged()


def sign_document(
    document: dict,
    params: NearDedupParams,
    boilerplate: np.ndarray | None = None,
    signature_lines: np.ndarray | None = None,
) -> tuple[tuple, dict | None]:
    """(member, signature row or None): the per-document work of the stage, without Beam.

    Boilerplate lines (``lines-v1`` keys in the sorted int64 array
    ``boilerplate``) are left out of the shingles, so documents that share
    only a footer do not look alike. Lines of ``signature_lines`` (in more
    documents than ``lines.signature_min_repeats``) are left out too when,
    together, they are at most half of what remains (:data:`SIGNATURE_LINES_MAX_SHARE`
    of its normalized characters): a site template or an ad block around a page
    is, while the paragraphs of a page copied more often than that are most of
    each copy and stay (:func:`signature_text`).
    """
    text, present = signature_text(document["text"], boilerplate, signature_lines)
    shingles = shingle_hashes(text, kind=params.shingle_kind, size=params.shingle_size, seed=params.seed)
    member = member_of(document, signed=shingles is not None, boilerplate=present)
    if shingles is None:
        return member, None
    distinct = distinct_shingles(shingles)
    row = {
        "doc_id": document["doc_id"],
        "source": document["source"],
        "source_rank": document["source_rank"],
        "date": document["date"],
        "minhash": None,
        "band_keys": [],
        "simhash": None,
        "simhash_keys": [],
        "shingles": None,
        "shingle_count": int(distinct.size),
    }
    if params.use_minhash:
        sig = minhash.signature(distinct, params.num_perm, params.seed)  # a minimum over the set: repeats add nothing
        row["minhash"] = minhash.to_bytes(sig)
        row["band_keys"] = minhash.band_keys(sig, params.bands, params.rows, params.seed)
    if params.use_simhash:
        fingerprint = simhash.fingerprint(distinct)
        row["simhash"] = fingerprint
        row["simhash_keys"] = simhash.block_keys(fingerprint, params.max_hamming, params.blocks, params.seed)
    if params.exact_sets:
        row["shingles"] = distinct.astype("<u8").tobytes()
    return member, row


#: Lines of ``signature_lines`` leave a document's signature if they are at most this share of it ...
SIGNATURE_LINES_MAX_SHARE = 0.5
#: ... or if what is left without them still has this many words (two shingles' width): a short text
#: under a license block or a template that many documents share is signed by its own words.
SIGNATURE_MIN_REST_WORDS = 10


def signature_text(text: str, boilerplate: np.ndarray | None, signature_lines: np.ndarray | None) -> tuple[str, tuple]:
    """(the text to shingle, the sorted boilerplate keys it holds): ``text`` without its boilerplate lines,
    and without its ``signature_lines`` if they are at most :data:`SIGNATURE_LINES_MAX_SHARE` of the
    normalized characters left or the rest has at least :data:`SIGNATURE_MIN_REST_WORDS` words. A
    document that is (almost) only such lines keeps them: they are what it is. Both key arrays are sorted
    (the side input's tuples): membership is a binary search (:func:`in_sorted`)."""
    has_boilerplate = boilerplate is not None and boilerplate.size
    has_signature_lines = signature_lines is not None and signature_lines.size
    if not has_boilerplate and not has_signature_lines:
        return text, ()
    keys, lengths = line_keys(text)
    drop = in_sorted(keys, boilerplate) if has_boilerplate else np.zeros(keys.size, dtype=bool)
    present = tuple(sorted(set(keys[drop].tolist())))
    if has_signature_lines:
        template = in_sorted(keys, signature_lines) & ~drop
        if template.any():
            if lengths[template].sum() <= SIGNATURE_LINES_MAX_SHARE * lengths[~drop].sum():
                drop |= template
            else:
                rest = itertools.compress(text.split("\n"), (~(drop | template)).tolist())
                if sum(len(line.split()) for line in rest) >= SIGNATURE_MIN_REST_WORDS:
                    drop |= template
    if drop.any():
        text = "\n".join(itertools.compress(text.split("\n"), (~drop).tolist()))
    return text, present
