"""Stage 2, exact dedup: annotate every document with its content-hash group.

Input: ``documents`` of the ingest layer (only ``doc_id``, ``content_hash``,
``source``, ``source_rank``, ``date`` are read). Output: one ``annotations`` row
per document (:data:`beam_pipeline.storage.schemas.EXACT_DEDUP`): the group size, the
representative and ``is_duplicate``. Nothing is deleted here; the policy in
``select`` decides.

The key is xxh3-128 of the normalized text (a collision needs ~2^64
documents): the ingest layer's ``content_hash``. With
``exact_dedup.normalize`` (seed 000 §6; off by default) it is xxh3-128 of the
text with every whitespace run made one space, the ends stripped and the case
folded (:func:`dedup_key`), so copies that differ only in case or spacing are
exact duplicates; the stage then reads the text too, and its annotations'
``content_hash`` is that key. The text itself is never changed. The representative is the minimum of
(source rank, missing date last, date, doc_id): curated sources beat web
copies, then the earliest capture, then a deterministic tie-break, as in
DESIGN.md. Because the choice is a minimum over a total order, it does not
depend on the order in which the runner delivers the group (unlike the random
ids that decided survivors in some peers: text-dedup #28).

The shape (DESIGN.md, "exact dedup")::

    partition i of the documents ─ (content_hash, member) ─┬─ CombinePerKey(min over the total order,
                                                            │     with a member count; hot-key fan-out)
                                                            │   -> (content_hash, (representative, size))
                                                            └─ CoGroupByKey(content_hash) -> one row per member
      -> annotations, partitioned by doc_id

**Against earlier versions** (``exact_dedup.against``, a monthly refresh):
the content hashes of earlier exact-dedup layers join the combine as
*previous* members, which come first in the order. A new document whose text
an earlier version holds is then a duplicate of that version's
representative (counter ``previous_version_copies``), like
``near_dedup.against`` for near copies. Previous members get no row and are
not counted: the stage accounts for this build's documents only.

A member is six small fields (no text). The combine is lifted: each worker
folds its members per hash before the shuffle, and a hash held by very many
documents (a boilerplate page copied everywhere) is spread over
:data:`HOT_KEY_FANOUT` intermediate keys first, so no worker merges all its
copies alone. The join sends each member to the group of its hash once.

**After a kill** (:mod:`beam_pipeline.transforms.task_ledger`): the build's
writer records each annotations partition it writes; a rerun keeps the
finished ones (their rows are dropped before the writer's ``GroupByKey``, not
sorted or written again). Everything before the write restarts: reading the
members, the combine and the join, with the stage's counts. A partition's
annotations depend on members in every partition (the representative of a
content hash), a shuffle's result does not outlive its job, and the
per-partition key is a column of the ingest layer (or one hash of the text
with ``normalize``), so a checkpoint of the keyed members would cost what it
saves.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.config.corpus import ConfigError
from beam_pipeline.records.accounting import COUNTS, CountingDoFn
from beam_pipeline.records.hashing import content_hash
from beam_pipeline.storage.layers import EarlierLayerError, earlier_layer, join
from beam_pipeline.transforms.gate import DocumentPartitions, ReadGatedRows
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.layer_io import ReadLayerRows

STAGE = "exact_dedup"
VERSION = "1"
ANNOTATIONS = "annotations"
INPUT_COLUMNS = ["doc_id", "content_hash", "source", "source_rank", "date"]
#: The name of the key's normalization when ``exact_dedup.normalize`` is on (in the layer key).
NORMALIZATION = "whitespace_case"
_WHITESPACE = re.compile(r"\s+")


def dedup_key(text: str, normalize: bool) -> str:
    """The exact-dedup key of a document's (ingest-normalized) text: its ``content_hash``, or with ``normalize``
    the xxh3-128 of the text with whitespace runs as one space, no leading or trailing space, case folded."""
    if normalize:
        text = _WHITESPACE.sub(" ", text).strip().casefold()
    return content_hash(text)


def stage_config(config) -> dict:
    """The layer-key slice of ``exact_dedup`` (without ``against``, whose layer keys are inputs). Without
    the normalization it is the config of before the option, so existing layers keep their keys."""
    dumped = config.model_dump(mode="json", exclude={"against", "normalize"})
    return {**dumped, "normalize": NORMALIZATION} if config.normalize else dumped


#: Intermediate keys a content hash's members are combined under before the final merge
#: (``CombinePerKey.with_hot_key_fanout``): bounds the work of a hash held by very many documents.
HOT_KEY_FANOUT = 8
_MEMBERS, _REPRESENTATIVE = "members", "representative"


class AnnotateExactDuplicates(beam.PTransform):
    """pbegin -> {"annotations": PCollection[row], "counts"}.

    ``documents`` are the ingest layer's documents partitions (with the stage's
    gate when dedup is gated in the cascade: :mod:`beam_pipeline.transforms.gate`),
    read once every layer of ``after`` is committed.
    """

    def __init__(
        self,
        documents: DocumentPartitions | Iterable[str],
        after=(),
        previous: tuple["EarlierExactLayer", ...] = (),
        normalize: bool = False,
    ):
        super().__init__()
        self._documents = DocumentPartitions.of(documents)
        self._after = tuple(after)
        self._previous = tuple(previous)
        self._normalize = normalize
        for layer in self._previous:  # keys of another normalization never meet this build's
            if layer.normalize != normalize:
                raise ConfigError(
                    f"exact_dedup.against: layer {layer.key} was keyed with normalize: {str(layer.normalize).lower()}, "
                    f"this build with normalize: {str(normalize).lower()}; their keys cannot match"
                )

    def expand(self, pbegin):
        columns = INPUT_COLUMNS + (["text"] if self._normalize else [])
        read = pbegin | "ReadDocuments" >> ReadGatedRows(self._documents, columns, STAGE, self._after)
        members = read["rows"] | "KeyByContentHash" >> beam.ParDo(_MemberFn(self._normalize)).with_output_types(
            StrKeyed
        ).with_outputs(COUNTS, main=_MEMBERS)
        keyed = members[_MEMBERS]  # (content_hash, member)
        if self._previous:
            earlier = (
                pbegin
                | "ReadEarlierVersions"
                >> ReadLayerRows(
                    [path for layer in self._previous for path in layer.annotation_paths], PREVIOUS_COLUMNS
                )
                | "EarlierContent" >> beam.Map(previous_member).with_output_types(StrKeyed)
                | "OnePerContent" >> beam.Distinct()
            )
            keyed = (keyed, earlier) | "WithEarlierVersions" >> beam.Flatten()
        representatives = (
            keyed
            | "PickRepresentative" >> beam.CombinePerKey(RepresentativeFn()).with_hot_key_fanout(HOT_KEY_FANOUT)
            | "KeyedByContentHash" >> beam.Map(lambda kv: kv).with_output_types(StrKeyed)  # the fan-out drops the type
        )
        annotated = (
            {_MEMBERS: keyed, _REPRESENTATIVE: representatives}
            | "JoinMembersWithRepresentative" >> beam.CoGroupByKey()
            | "Annotate" >> beam.ParDo(_AnnotateFn()).with_outputs(COUNTS, main=ANNOTATIONS)
        )
        gated = (read[COUNTS],) if COUNTS in read else ()
        return {ANNOTATIONS: annotated[ANNOTATIONS], COUNTS: (members[COUNTS], annotated[COUNTS], *gated)}


def member_of(document: dict) -> tuple:
    """The fields of a document that the representative choice needs, as a tuple."""
    return (
        document["source_rank"],
        document["date"] is None,
        document["date"] or "",
        document["doc_id"],
        document["source"],
        False,
    )


#: Columns of an earlier exact-dedup layer's annotations that a refresh reads.
PREVIOUS_COLUMNS = ["content_hash", "representative"]


def previous_member(row: dict) -> tuple[str, tuple]:
    """(content_hash, member) of an earlier version's content: its representative there, first in the order."""
    return row["content_hash"], (0, False, "", row["representative"], "", True)


def representative_order(member: tuple) -> tuple:
    """Total order; the minimum is the representative: an earlier version's member first, then by source
    rank, dated before undated, date, doc_id (unique)."""
    rank, no_date, date, doc_id, _source, previous = member
    return (not previous, rank, no_date, date, doc_id)


@dataclasses.dataclass(frozen=True)
class EarlierExactLayer:
    """An earlier exact-dedup layer a refresh dedups against: its key and annotation partitions."""

    key: str
    annotation_paths: tuple[str, ...]
    normalize: bool = False  # its key's normalization (exact_dedup.normalize)


def resolve_against(root: str, entry: str) -> EarlierExactLayer:
    """An ``exact_dedup.against`` entry (a layer path/URI, or a dataset id under ``root``) -> its layer;
    :class:`ConfigError` when it names no complete exact-dedup layer."""
    try:
        path, ledger = earlier_layer(root, entry, STAGE, "exact_dedup.against")
    except EarlierLayerError as err:
        raise ConfigError(str(err)) from None
    parts = ledger["outputs"][ANNOTATIONS]["parts"]
    normalize = ledger.get("config", {}).get("normalize") == NORMALIZATION
    return EarlierExactLayer(ledger["key"], tuple(join(path, ANNOTATIONS, p["name"]) for p in parts), normalize)


class RepresentativeFn(beam.CombineFn):
    """Members of one content hash -> (the minimum member by :func:`representative_order`, member count)."""

    def create_accumulator(self):
        return None, 0

    def add_input(self, accumulator, member):
        best, count = accumulator
        if best is None or representative_order(member) < representative_order(best):
            best = member
        return best, count + 1

    def merge_accumulators(self, accumulators):
        best, count = None, 0
        for other, n in accumulators:
            if other is not None and (best is None or representative_order(other) < representative_order(best)):
                best = other
            count += n
        return best, count

    def extract_output(self, accumulator):
        return accumulator


def annotate_group(content_hash: str, members: Iterable[tuple]) -> list[dict]:
    """Annotation rows for every member of this build in one content-hash group."""
    members = list(members)
    best = min(members, key=representative_order)
    return [annotation(content_hash, m, best, len(members)) for m in members if not m[5]]


def annotation(content_hash: str, member: tuple, representative: tuple, size: int) -> dict:
    """The row of ``member``: a duplicate unless it is the representative (a copy of an earlier version's
    content always is, even under the same doc_id)."""
    return {
        "doc_id": member[3],
        "content_hash": content_hash,
        "duplicate_count": size,
        "representative": representative[3],
        "is_duplicate": representative[5] or member[3] != representative[3],
    }


class _MemberFn(CountingDoFn):
    """document (INPUT_COLUMNS, and ``text`` with ``normalize``) -> (key, member); counts it ``in``."""

    def __init__(self, normalize: bool = False):
        super().__init__(STAGE)
        self._normalize = normalize

    def process(self, document: dict) -> Iterator[tuple[str, tuple]]:
        self.tally.entered(document["source"])
        key = dedup_key(document["text"], True) if self._normalize else document["content_hash"]
        yield key, member_of(document)


class _AnnotateFn(CountingDoFn):
    """(content_hash, {members, representative: [(member, size)]}) -> one annotation row per member."""

    def __init__(self):
        super().__init__(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator[dict]:
        content_hash, groups = joined
        ((best, size),) = groups[_REPRESENTATIVE]
        for member in groups[_MEMBERS]:
            if member[5]:
                continue  # an earlier version's content: no row, not counted
            self.tally.passed(member[4])
            if best[5]:
                self.tally.inc("previous_version_copies")
            yield annotation(content_hash, member, best, size)
