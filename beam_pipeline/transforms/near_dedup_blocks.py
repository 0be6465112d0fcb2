"""Block transport of the near-dedup stage: signatures, members and a document's parts in blocks per doc
group, LSH keys in blocks per key group.

Every grouping of the stage moves blocks, not one runner element per item
(:mod:`beam_pipeline.transforms.blocks`; ``docs/near_dedup.md``, "Blocks").
A signature's payload (what
:class:`~beam_pipeline.transforms.near_dedup_verify.PairCheck` compares,
:func:`payload_of`) travels with its doc_id and layer in blocks per doc group
(:func:`doc_blocks`, :class:`DocBlocks`), its exact shingle set apart when
:func:`shingles_apart`; :func:`first_payloads` reads them back where the
verification joins meet them. Band keys and SimHash block keys travel in
blocks per key group (:class:`LshKeyBlocks`, :func:`key_blocks`), which
:func:`shared_keys` splits into keys again after the ``GroupByKey``.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.records.accounting import LOST_IN_JOIN
from beam_pipeline.transforms.blocks import BLOCK_BYTES
from beam_pipeline.transforms.bundle_budget import output_bytes
from beam_pipeline.transforms.connected_components import BundleBlocksFn, NodeBlocks
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.near_dedup_params import BANDS, BLOCKS, STAGE, NearDedupParams

#: The columns of a signature row that verification reads (:class:`PairCheck`'s payload).
PAYLOAD_COLUMNS = ["minhash", "simhash", "shingles", "shingle_count"]
#: The place of the shingle set in a payload whose set travels apart (:func:`add_payload`).
SHINGLES_APART = True


def payload_of(row: dict) -> tuple:
    """What :class:`PairCheck` compares, from a signature row (``shingle_count`` is None in
    layers written before it existed: such pairs are judged by Jaccard alone)."""
    return tuple(row.get(column) for column in PAYLOAD_COLUMNS)


def shingles_apart(params: NearDedupParams) -> bool:
    """Whether the shingle sets travel apart from the payloads (:class:`VerifyPairs`): when there are
    sets (``exact_sets``) and MinHash, whose check reads them (SimHash alone never does)."""
    return params.exact_sets and params.use_minhash


def add_payload(payloads: list, shingle_sets: list, doc_id: str, layer: int, payload: tuple, apart: bool) -> None:
    """Append ``(doc_id, layer, payload)`` to ``payloads``; with ``apart`` and a shingle set, the payload
    holds :data:`SHINGLES_APART` in its place and ``(doc_id, layer, set)`` goes to ``shingle_sets``."""
    if apart and payload[2] is not None:
        shingle_sets.append((doc_id, layer, payload[2]))
        payload = payload[:2] + (SHINGLES_APART,) + payload[3:]
    payloads.append((doc_id, layer, payload))


def doc_blocks(entries: Iterable[tuple], groups: int) -> list[tuple[int, tuple]]:
    """Entries whose first field is a doc_id (signatures ``(doc_id, layer, payload)``, members
    ``(doc_id, member)``) -> (doc group, block of entries) per group that has any."""
    blocks = NodeBlocks(groups)
    for entry in entries:
        blocks.add(entry[0], entry)
    return blocks.take()


class DocBlocks(beam.PTransform):
    """Entries whose first field is a doc_id ((doc_id, value) parts of a document, (a, b, carry) pairs)
    -> (doc group of that doc_id, block of entries), one block per bundle and group (:func:`doc_blocks`
    of a stream)."""

    def __init__(self, groups: int):
        super().__init__()
        self._groups = groups

    def expand(self, entries):
        return entries | "InBlocks" >> beam.ParDo(_DocBlocksFn(self._groups)).with_output_types(IntKeyed)


class _DocBlocksFn(BundleBlocksFn):
    def process(self, entry: tuple) -> Iterator:
        self._out.add(entry[0], entry)
        yield from self._flush_if_full()


def first_payloads(
    blocks: Iterable[tuple], wanted: set[str], shingle_blocks: Iterable[Iterable[tuple]] = ()
) -> dict[str, tuple]:
    """{doc_id: payload of the first layer (lowest index) that holds it} for the ``wanted`` doc_ids, with
    its shingle set put back from ``shingle_blocks`` (blocks of (doc_id, layer, set)) where the payload
    holds :data:`SHINGLES_APART`.

    Raises ValueError naming a wanted document without a signature, or without the shingle set its
    payload says travels apart: every pair's ends were signed (or are in a committed previous layer),
    so a runner lost records.
    """
    found: dict[str, tuple[int, tuple]] = {}
    for block in blocks:
        for doc_id, layer, payload in block:
            if doc_id in wanted and (doc_id not in found or layer < found[doc_id][0]):
                found[doc_id] = (layer, payload)
    missing = wanted.difference(found)
    if missing:
        raise ValueError(f"{STAGE}: no signature for document {min(missing)} of a pair to verify ({LOST_IN_JOIN})")
    apart = {(doc_id, layer) for doc_id, (layer, payload) in found.items() if payload[2] is SHINGLES_APART}
    if apart:
        sets = {
            (doc_id, layer): shingles
            for block in shingle_blocks
            for doc_id, layer, shingles in block
            if (doc_id, layer) in apart
        }
        if len(sets) < len(apart):
            doc_id = min(doc_id for doc_id, layer in apart.difference(sets))
            raise ValueError(f"{STAGE}: no shingle set for document {doc_id} of a pair to verify ({LOST_IN_JOIN})")
        for key, shingles in sets.items():
            layer, payload = found[key[0]]
            found[key[0]] = (layer, payload[:2] + (shingles,) + payload[3:])
    return {doc_id: payload for doc_id, (_, payload) in found.items()}


class LshKeyBlocks:
    """A task's band keys and SimHash block keys with their entries, handed to the runner in blocks.

    A key's entry is ``(doc_id, previous-version member or None)`` for a band
    key and ``(doc_id, member or None, fingerprint)`` for a block key. Emitted
    per runner element, 14 band keys a document made the grouping the stage's
    largest cost (each is encoded, shuffled, grouped and handed to a DoFn
    call, nearly always alone in its bucket). Here a task sends one block per
    *key group* (``key % key_groups``): tagged ``bands`` / ``blocks``,
    ``(group, (little-endian int64 keys, entries))``. The ``GroupByKey`` on the
    group brings every entry of a key to one place, where
    :func:`shared_keys` splits the blocks into keys again, so the buckets and
    their edges are exactly those of a ``GroupByKey`` on the key itself
    (docs/decisions.md, "LSH keys in blocks").
    """

    def __init__(self, params: NearDedupParams, key_groups: int):
        self._params = params
        self._groups = key_groups
        self._bands: tuple[list, list] = ([], [])
        self._blocks: tuple[list, list] = ([], [])

    def add(self, row: dict, previous_member: tuple | None) -> None:
        """Add a signature row's band keys and block keys (``previous_member``: None for this corpus)."""
        doc_id = row["doc_id"]
        if self._params.use_minhash:
            band_keys = row["band_keys"] or ()
            self._bands[0].extend(band_keys)
            self._bands[1].extend(itertools.repeat((doc_id, previous_member), len(band_keys)))
        if self._params.use_simhash:
            block_keys = row["simhash_keys"] or ()
            self._blocks[0].extend(block_keys)
            self._blocks[1].extend(itertools.repeat((doc_id, previous_member, row["simhash"]), len(block_keys)))

    def tagged(self) -> Iterator:
        for tag, (keys, entries) in ((BANDS, self._bands), (BLOCKS, self._blocks)):
            for block in key_blocks(keys, entries, self._groups):
                yield beam.pvalue.TaggedOutput(tag, block)


def key_blocks(keys: list[int], entries: list, groups: int) -> Iterator[tuple[int, tuple[bytes, tuple]]]:
    """(group, (keys as little-endian int64 bytes, their entries)) per key group ``key % groups`` that has keys,
    a group's in blocks of at most :data:`~beam_pipeline.transforms.blocks.BLOCK_BYTES` (judged by its
    first entry: a task's entries are alike)."""
    if not keys:
        return
    array = np.array(keys, dtype="<i8")
    group_of = array % groups
    order = np.argsort(group_of, kind="stable")
    ordered = group_of[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    for start, end in zip(starts.tolist(), np.r_[starts[1:], order.size].tolist()):
        chosen, group = order[start:end], int(ordered[start])
        per_block = max(1, BLOCK_BYTES // (8 + output_bytes(entries[int(chosen[0])])))
        for at in range(0, chosen.size, per_block):
            part = chosen[at : at + per_block]
            yield group, (array[part].tobytes(), tuple(entries[i] for i in part.tolist()))


def shared_keys(blocks: Iterable[tuple[bytes, tuple]]) -> Iterator[tuple[int, list]]:
    """(key, its entries) for every key of a group's blocks that two or more entries share, in key order.

    A key with one entry makes no pair, so it is skipped here instead of being handed on.
    """
    blocks = list(blocks)
    if not blocks:
        return
    keys = np.concatenate([np.frombuffer(data, dtype="<i8") for data, _ in blocks])
    entries = [entry for _, block_entries in blocks for entry in block_entries]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    shared = ends - starts > 1
    for start, end in zip(starts[shared].tolist(), ends[shared].tolist()):
        yield int(ordered[start]), [entries[i] for i in order[start:end].tolist()]
