"""Verification in the near-dedup stage: the two joins that bring a pair's ends their signatures, and
the check that decides the pair.

:class:`VerifyPairs` serves the candidate pairs
(:class:`~beam_pipeline.transforms.near_dedup.MinHashEdges`) and the check of
each cluster member against its representative
(:class:`~beam_pipeline.transforms.near_dedup.AssignClusters`);
:class:`PairCheck` decides a pair from its two payloads by the rules of
:mod:`beam_pipeline.dedup.verify` (``docs/near_dedup.md``, "Verification").
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.dedup import minhash, simhash, verify
from beam_pipeline.records.accounting import COUNTS, CountingDoFn
from beam_pipeline.transforms.connected_components import BundleBlocksFn
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.near_dedup_blocks import first_payloads
from beam_pipeline.transforms.near_dedup_params import (
    CHECKED,
    PAIRS,
    SELECTED,
    SHINGLES,
    SIGNATURE,
    STAGE,
    NearDedupParams,
)


class VerifyPairs(beam.PTransform):
    """{"pairs": (a, b, carry), "signature": (doc group, block of (doc_id, layer, payload)), "shingles"
    (optional): (doc group, block of (doc_id, layer, shingle set))} -> {"checked": (a, b, carry, ok),
    "counts", "selected" (with "shingles"): (doc group, block of the shingle sets of the pairs' ends)}.

    ``b`` is a document of this corpus; ``a`` of this corpus or of an earlier
    version. The pairs travel in blocks per doc group of ``a``
    (:func:`~beam_pipeline.transforms.connected_components.node_group`, the
    groups of :func:`doc_blocks`) and meet the signatures of that group
    (``CoGroupByKey`` on the group), which drops repeated (a, b, carry) and
    attaches ``a``'s payload from the first layer that has it (this corpus,
    then the ``against`` entries in order); then in blocks per doc group of
    ``b`` they meet those signatures (``CoGroupByKey``), where
    ``check(payload_a, payload_b)`` decides. Counts ``<label>_verified`` and
    ``<label>_rejected`` per distinct (a, b, carry).

    Signatures travel as blocks, not one element per document, because every
    document's signature goes through each join whether or not it is in a pair.

    The exact shingle sets (8 B per distinct shingle, about the text's size)
    do not go through both joins: with :func:`shingles_apart`, a payload holds
    :data:`SHINGLES_APART` in the set's place and the sets come as
    "shingles". Only the first join reads them: each pair also asks, in the
    doc group of ``b``, for ``b``'s set (:class:`_PairRequestsFn`), and the
    first join hands on the sets of its group's ends, ``b``'s with the pairs
    that go to ``b``'s group (:class:`_AttachFirstFn`; :func:`first_payloads`
    puts each set back in its payload) and all of them as "selected", which
    the representatives' check reads instead of every document's set (every
    member of a cluster is an end of a verified candidate pair). Moved
    through four joins for every document, the sets were most of what the
    defaults' verification cost over ``verify: signature``
    (``bench/results/near-dedup-defaults-cost-20261207-b.md``).
    """

    def __init__(self, check, label: str, groups: int):
        super().__init__()
        self._check = check
        self._label = label
        self._groups = groups

    def expand(self, inputs):
        with_sets = SHINGLES in inputs
        shingles = {SHINGLES: inputs[SHINGLES]} if with_sets else {}
        attached = (
            {
                PAIRS: inputs[PAIRS]
                | "PairsByFirst" >> beam.ParDo(_PairRequestsFn(self._groups, with_sets)).with_output_types(IntKeyed),
                SIGNATURE: inputs[SIGNATURE],
                **shingles,
            }
            | "JoinFirstSignature" >> beam.CoGroupByKey()
            | "AttachFirst"
            >> beam.ParDo(_AttachFirstFn(self._groups))
            .with_output_types(IntKeyed, **{SELECTED: IntKeyed})
            .with_outputs(SELECTED, main=PAIRS)
        )
        checked = (
            {PAIRS: attached[PAIRS], SIGNATURE: inputs[SIGNATURE]}
            | "JoinSecondSignature" >> beam.CoGroupByKey()
            | "Check" >> beam.ParDo(_CheckFn(self._check, self._label)).with_outputs(COUNTS, main=CHECKED)
        )
        selected = {SELECTED: attached[SELECTED]} if with_sets else {}
        return {CHECKED: checked[CHECKED], COUNTS: checked[COUNTS], **selected}


class PairCheck:
    """Is a candidate pair a near duplicate? ``criteria``: ``minhash`` (LSH candidates) or ``any``.

    MinHash, by ``verify``: estimated Jaccard from the signatures
    (``signature``) or true Jaccard of the shingle sets (``jaccard``) at least
    ``verify_threshold``; ``two_tier``: :func:`beam_pipeline.dedup.verify.accept`
    (``verify_threshold`` as the first tier, then ``low_threshold`` with
    ``containment_threshold``, and ``short_threshold`` when a text has fewer
    than ``short_shingles`` shingles) on the estimated Jaccard and the
    containment it implies with the two shingle counts, or on the exact sets.
    SimHash: Hamming distance at most ``max_hamming``.
    """

    def __init__(self, params: NearDedupParams, criteria: str):
        self._exact = params.exact_sets
        self._two_tier = params.verify == "two_tier"
        self._threshold = params.verify_threshold
        self._tiers = dict(
            high=params.verify_threshold,
            low=params.low_threshold,
            min_containment=params.containment_threshold,
            min_shingles=params.short_shingles,
            short_jaccard=params.short_threshold,
        )
        self._max_hamming = params.max_hamming
        self._simhash = criteria == "any"

    def __call__(self, a: tuple, b: tuple) -> bool:
        minhash_a, simhash_a = a[:2]
        minhash_b, simhash_b = b[:2]
        if minhash_a is not None and minhash_b is not None and self._minhash_accepts(a, b):
            return True
        if self._simhash and simhash_a is not None and simhash_b is not None:
            return simhash.hamming(simhash_a, simhash_b) <= self._max_hamming
        return False

    def _minhash_accepts(self, a: tuple, b: tuple) -> bool:
        minhash_a, _, shingles_a, count_a = a
        minhash_b, _, shingles_b, count_b = b
        if self._exact and shingles_a is not None and shingles_b is not None:
            x, y = np.frombuffer(shingles_a, dtype="<u8"), np.frombuffer(shingles_b, dtype="<u8")
            if self._two_tier:
                return verify.two_tier(x, y, **self._tiers)
            return verify.jaccard(x, y) >= self._threshold
        similarity = minhash.estimate_jaccard(minhash.from_bytes(minhash_a), minhash.from_bytes(minhash_b))
        if not self._two_tier or count_a is None or count_b is None:
            return similarity >= self._threshold
        return verify.accept(
            similarity, verify.estimated_containment(similarity, count_a, count_b), min(count_a, count_b), **self._tiers
        )


class _PairRequestsFn(BundleBlocksFn):
    """(a, b, carry) -> blocks per doc group: the pair in ``a``'s group and, ``with_sets``, the request
    ``(b,)`` for ``b``'s shingle set in ``b``'s group (a block holds both kinds: :func:`split_requests`)."""

    def __init__(self, groups: int, with_sets: bool):
        super().__init__(groups)
        self._with_sets = with_sets

    def process(self, pair: tuple) -> Iterator:
        self._out.add(pair[0], pair)
        if self._with_sets:
            self._out.add(pair[1], (pair[1],))
        yield from self._flush_if_full()


def split_requests(blocks: Iterable[tuple]) -> tuple[set[tuple], set[str]]:
    """(distinct pairs (a, b, carry), doc_ids whose shingle set is asked for) of a group's request blocks."""
    pairs, asked = set(), set()
    for block in blocks:
        for item in block:
            if len(item) == 1:
                asked.add(item[0])
            else:
                pairs.add(item)
    return pairs, asked


def split_attached(blocks: Iterable[tuple]) -> tuple[list[tuple], list[tuple]]:
    """([(b, a, carry, payload of a)], [(doc_id, layer, shingle set)]) of a group's attached blocks."""
    pairs, sets = [], []
    for block in blocks:
        for item in block:
            (pairs if len(item) == 4 else sets).append(item)
    return pairs, sets


def sets_of(blocks: Iterable[Iterable[tuple]], doc_ids: set[str]) -> list[tuple]:
    """The (doc_id, layer, shingle set) entries of ``blocks`` whose doc_id is one of ``doc_ids``, every layer's."""
    return [entry for block in blocks for entry in block if entry[0] in doc_ids]


class _AttachFirstFn(BundleBlocksFn):
    """(group, {pairs: [blocks of (a, b, carry) and (b,)], signature: [blocks], shingles (optional): [blocks]})
    -> blocks of (b, a, carry, payload of a) per doc group of b, one per distinct (a, b, carry), and of the
    shingle sets (doc_id, layer, set) asked for by (b,) in this group; tagged ``selected``: (group, the sets
    of this group's ends, ``a`` and ``b``)."""

    def process(self, joined: tuple[int, dict]) -> Iterator:
        group, parts = joined
        pairs, asked = split_requests(parts[PAIRS])
        shingles = list(parts.get(SHINGLES, ()))
        if pairs:
            payloads = first_payloads(parts[SIGNATURE], {a for a, _, _ in pairs}, shingles)
            for a, b, carry in pairs:
                self._out.add(b, (b, a, carry, payloads[a]))
        if shingles:
            for entry in sets_of(shingles, asked):
                self._out.add(entry[0], entry)
            selected = sets_of(shingles, asked | {a for a, _, _ in pairs})
            if selected:
                yield beam.pvalue.TaggedOutput(SELECTED, (group, tuple(selected)))
        yield from self._flush_if_full()


class _CheckFn(CountingDoFn):
    """(group, {pairs: [blocks of (b, a, carry, payload of a) and of (doc_id, layer, shingle set)],
    signature: [blocks]}) -> (a, b, carry, ok) per pair."""

    def __init__(self, check, label: str):
        super().__init__(STAGE)
        self._check = check
        self._label = label

    def process(self, joined: tuple[int, dict]) -> Iterator[tuple]:
        _, parts = joined
        pairs, sets = split_attached(parts[PAIRS])
        if not pairs:
            return
        payloads = first_payloads(parts[SIGNATURE], {b for b, _, _, _ in pairs}, [sets])
        for b, a, carry, payload_a in pairs:
            ok = self._check(payload_a, payloads[b])
            self.tally.inc(f"{self._label}_{'verified' if ok else 'rejected'}")
            yield a, b, carry, ok
