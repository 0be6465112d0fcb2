"""What a cascade stage sees: the documents its gate keeps.

Every member of the cascade (the scorers and the dedup stages, in
``cascade.stages`` order; :mod:`beam_pipeline.config.scorers`) sees only the
documents that the policy, as far as it is known before the stage, keeps:
the built-in rules of :func:`beam_pipeline.policy.decision.decide` (duplicates of the
dedup stages before it, length, words), then the threshold rules over the
layers before it (:meth:`beam_pipeline.policy.rules.Plan.first_reason`). So
each expensive step sees the smallest surviving corpus (DESIGN.md, the
seed's cascade: language ID and cheap heuristics, then dedup, then the
learned classifier, then safety and PII), and a duplicate is only ever a copy
of a document that survived the rules before dedup.

:class:`Gate` is the decision; :class:`DocumentPartitions` the documents of a
dedup stage, partition by partition, with the gate applied on read. A document
the gate stops is counted ``filtered:<reason>`` by the stage and gets no row.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.storage.layers import read_partition_rows
from beam_pipeline.transforms.bundle_budget import BudgetedExpandFn, BundleBudget, bundle_budget
from beam_pipeline.transforms.layer_io import PartitionIndexes, PartitionInputs, ReadLayerRows

#: Document columns a gate reads (:func:`beam_pipeline.policy.decision.decide` and rules over ``document``).
GATE_COLUMNS = ("doc_id", "source", "domain", "url", "license", "date", "n_chars", "text")


class Gate:
    """The policy rules that apply before cascade stage ``index`` (picklable)."""

    def __init__(self, policy, plan, index: int):
        self.policy = policy
        self.plan = plan
        self.index = index

    def reason(self, document: dict, rows: dict) -> str | None:
        from beam_pipeline.policy.decision import decide

        reason = decide(document, rows.get("exact"), self.policy, rows.get("near"))
        if reason is not None:
            return reason
        return self.plan.first_reason(document["source"], rows, upto=self.index)


class DocumentPartitions:
    """The ingest layer's documents partitions as a dedup stage reads them: all, or those its gate keeps.

    ``paths``: one documents partition per index. With a ``gate``, ``layers``
    are the layers it reads (``{name: partition paths}``: the scorer layers and
    dedup layers before the stage), joined on doc_id partition by partition.
    Picklable; the stage's tasks call :meth:`rows`.
    """

    def __init__(self, paths, gate: Gate | None = None, layers: dict[str, list[str]] | None = None):
        self.paths = tuple(paths)
        self.gate = gate
        self._inputs = (
            None
            if not layers and gate is None
            else PartitionInputs.of(list(self.paths), None, {name: (p, None) for name, p in (layers or {}).items()})
        )

    @classmethod
    def of(cls, documents: "DocumentPartitions | Iterable[str]") -> "DocumentPartitions":
        """``documents`` as DocumentPartitions (partition paths: every document, no gate)."""
        return documents if isinstance(documents, DocumentPartitions) else cls(documents)

    @property
    def count(self) -> int:
        return len(self.paths)

    def rows(
        self,
        index: int,
        columns: list[str] | None = None,
        tally=None,
        where: str = "gate",
        annotation: str | None = None,
    ) -> Iterator[dict]:
        """The documents of partition ``index`` (``columns`` of them) that the gate keeps, in doc_id order.

        ``tally`` (a :class:`beam_pipeline.records.accounting.Tally`) counts each stopped document as entered and
        ``filtered:<reason>``; the caller counts the documents it receives. ``annotation``
        (``<layer>.<column>`` of a layer given at construction) adds that value to each document as
        ``annotation`` (None where the layer has no row or is not given)."""
        gate = self.gate
        if self._inputs is None:
            for document in read_partition_rows(self.paths[index], columns):
                if annotation is not None:
                    document["annotation"] = None
                yield document
            return
        layer, _, column = (annotation or "").partition(".")
        for document, rows in self._inputs.joined(index, where):
            rows["document"] = document
            reason = gate.reason(document, rows) if gate is not None else None
            if reason is None:
                kept = document if columns is None else {c: document[c] for c in columns}
                if annotation is not None:
                    kept["annotation"] = (rows.get(layer) or {}).get(column)
                yield kept
            elif tally is not None:
                tally.entered(document["source"])
                tally.filtered(reason, document["source"])


class ReadGatedRows(beam.PTransform):
    """pbegin -> {"rows": the documents (``columns``) the gate keeps, "counts": the stopped ones of
    ``stage``, counted ``in`` and ``filtered:<reason>``}, read once ``after`` is committed.

    Without a gate it is :class:`~beam_pipeline.transforms.layer_io.ReadLayerRows` (no counts)."""

    def __init__(self, documents: DocumentPartitions, columns: Iterable[str], stage: str, after: Iterable = ()):
        super().__init__()
        self._documents = documents
        self._columns = list(columns)
        self._stage = stage
        self._after = tuple(after)

    def expand(self, pbegin):
        documents = self._documents
        if documents.gate is None:
            return {"rows": pbegin | "ReadRows" >> ReadLayerRows(documents.paths, self._columns, self._after)}
        read = (
            pbegin
            | "Partitions" >> PartitionIndexes(documents.count, self._after)
            | "ReadGated"
            >> beam.ParDo(
                _GatedRowsFn(documents, self._columns, self._stage, bundle_budget(pbegin.pipeline))
            ).with_outputs(COUNTS, main="rows")
        )
        return {"rows": read["rows"], COUNTS: read[COUNTS]}


class _GatedRowsFn(BudgetedExpandFn):
    """A partition index -> the documents the gate keeps, and the counts of those it stops; a bundle
    stops taking partitions once it has emitted its budget."""

    def __init__(self, documents: DocumentPartitions, columns: list[str], stage: str, budget: BundleBudget):
        super().__init__(budget)
        self._documents = documents
        self._columns = columns
        self._stage = stage

    def setup(self):
        self._tally = Tally(self._stage)

    def items(self, index: int, start: int) -> Iterator:
        return self._documents.rows(index, self._columns, self._tally, where=f"{self._stage} gate")

    def settle(self) -> Iterator:
        return self._tally.tagged()
