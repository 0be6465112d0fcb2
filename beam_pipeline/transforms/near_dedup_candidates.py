"""Candidate pairs of the near-dedup stage: the buckets of shared band keys and SimHash block keys.

After the ``GroupByKey`` on the key group (blocks of
:class:`~beam_pipeline.transforms.near_dedup_blocks.LshKeyBlocks`),
:class:`MinHashBucketFn` makes a star of each band bucket, the pairs to verify
(:class:`~beam_pipeline.transforms.near_dedup.MinHashEdges`), and
:class:`SimHashBucketFn` keeps the pairs of a block bucket within
``max_hamming`` bits (:class:`~beam_pipeline.transforms.near_dedup.SimHashEdges`).
Both hand on the previous-version members of the buckets that hold a new
document (``docs/near_dedup.md``, "LSH bands: the S-curve and the operating
point", "SimHash").
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.dedup import simhash
from beam_pipeline.records.accounting import CountingDoFn
from beam_pipeline.transforms.blocks import windowed
from beam_pipeline.transforms.near_dedup_blocks import shared_keys
from beam_pipeline.transforms.near_dedup_clusters import representative_order
from beam_pipeline.transforms.near_dedup_params import PREVIOUS, STAGE


class MinHashBucketFn(CountingDoFn):
    """(key group, [block of band keys]) -> star edges (a, b) to the smallest doc_id of each shared band key.

    ``b`` is always a document of this corpus (its payload is in the second
    join); previous-version documents are never paired with each other.
    Previous-version members of buckets that hold a new document go to the
    ``previous`` output (their rank and date for the representative choice).

    A near-duplicate pair shares several bands (at J = 0.8 and 14 x 8, about
    2.4 of 14; copies share all 14), so a bundle emits each distinct pair once,
    when it ends or holds :data:`PENDING_PAIRS`; ``candidate_pairs`` still
    counts every star edge of every key. (The verification drops repeats
    anyway; this spares the runner moving them: 322k star edges were 40k
    distinct pairs in the 200 MB side-by-side corpus.)
    """

    def __init__(self):
        super().__init__(STAGE)

    def start_bundle(self):
        self._pairs: set[tuple[str, str]] = set()

    def process(self, grouped: tuple[int, Iterable[tuple[bytes, tuple]]]) -> Iterator:
        for _, entries in shared_keys(grouped[1]):
            yield from self._star(entries)
        if len(self._pairs) >= PENDING_PAIRS:
            yield from sorted(self._pairs)
            self._pairs = set()

    def finish_bundle(self):
        for pair in sorted(self._pairs):
            yield windowed(pair)
        self._pairs = set()
        yield from super().finish_bundle()

    def _star(self, entries: list[tuple]) -> Iterator:
        new, old = _split_bucket(entries)
        if not new:
            return
        ids = sorted(new | set(old))
        anchor, produced = ids[0], 0
        for other in ids[1:]:
            if other in new:
                self._pairs.add((anchor, other))
            elif anchor in new:
                self._pairs.add((other, anchor))
            else:
                continue
            produced += 1
        self.tally.inc("candidate_pairs", n=produced)
        yield from _previous_members(old)


#: Distinct candidate pairs a :class:`MinHashBucketFn` bundle holds before it hands them on.
PENDING_PAIRS = 1 << 20


class SimHashBucketFn(CountingDoFn):
    """(key group, [block of SimHash block keys]) -> pairs within ``max_hamming`` bits in each shared block key."""

    def __init__(self, max_hamming: int):
        super().__init__(STAGE)
        self._max_hamming = max_hamming

    def process(self, grouped: tuple[int, Iterable[tuple[bytes, tuple]]]) -> Iterator:
        for _, entries in shared_keys(grouped[1]):
            yield from self._close_pairs(entries)

    def _close_pairs(self, entries: list[tuple]) -> Iterator:
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
                self.tally.inc("simhash_pairs")
                yield a, b
        # a previous version's document is reported where it pairs with a new one, or is one (the same doc_id)
        yield from _previous_members({d: m for d, m in old.items() if d in used or d in new})


def _split_bucket(entries: Iterable[tuple[str, tuple | None]]) -> tuple[set, dict]:
    """(doc_ids of this corpus, {doc_id: member} of previous versions) of one bucket; a document
    of several earlier versions keeps its first member in representative order."""
    new, old = set(), {}
    for doc_id, previous_member in entries:
        if previous_member is None:
            new.add(doc_id)
        elif doc_id not in old or representative_order(previous_member) < representative_order(old[doc_id]):
            old[doc_id] = previous_member
    return new, old


def _previous_members(old: dict) -> Iterator:
    for doc_id, member in sorted(old.items()):
        yield beam.pvalue.TaggedOutput(PREVIOUS, (doc_id, member))
