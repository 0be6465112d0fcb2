"""Stage 7, select: apply the policy; write the gold text and every decision.

Inputs: ``documents`` of the ingest layer and ``annotations`` of every scoring
stage (for now exact dedup), joined on ``doc_id``. Outputs: ``gold`` rows
(:data:`beam_pipeline.schemas.GOLD`) for kept documents and one ``decisions``
row per document (:data:`beam_pipeline.schemas.DECISION`) with its reason.

The decision itself is :func:`beam_pipeline.policy.decide`, a pure function;
this module only carries the data flow. Counters: ``passed`` and
``filtered:<reason>``, per source too.
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from beam_pipeline.accounting import CountEntering, StageCounters
from beam_pipeline.config import PolicyConfig
from beam_pipeline.policy import decide
from beam_pipeline.transforms.keys import StrKeyed

STAGE = "select"
VERSION = "1"
GOLD, DECISIONS = "gold", "decisions"


class ApplyPolicy(beam.PTransform):
    """{"documents": PCollection, "exact": PCollection} -> {"gold", "decisions"}."""

    def __init__(self, policy: PolicyConfig):
        super().__init__()
        self._policy = policy

    def expand(self, inputs):
        documents = inputs["documents"] | "Count" >> CountEntering(STAGE)
        keyed = {"document": documents | "KeyDocuments" >> beam.Map(lambda d: (d["doc_id"], d)).with_output_types(StrKeyed)}
        if "exact" in inputs:
            keyed["exact"] = inputs["exact"] | "KeyExact" >> beam.Map(lambda a: (a["doc_id"], a)).with_output_types(StrKeyed)
        decided = (
            keyed
            | "JoinOnDocId" >> beam.CoGroupByKey()
            | "Decide" >> beam.ParDo(DecideFn(self._policy)).with_outputs(DECISIONS, main=GOLD)
        )
        return {GOLD: decided[GOLD], DECISIONS: decided[DECISIONS]}


class DecideFn(beam.DoFn):
    """(doc_id, {"document": [doc], "exact": [annotation]}) -> gold row + decision row."""

    def __init__(self, policy: PolicyConfig):
        self._policy = policy

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator:
        doc_id, parts = joined
        documents = list(parts["document"])
        if not documents:  # an annotation without its document: an upstream bug
            raise ValueError(f"select: annotations for doc_id {doc_id} but no document")
        document = documents[0]
        exact = next(iter(parts.get("exact", [])), None)
        reason = decide(document, exact, self._policy)
        source = document["source"]
        yield beam.pvalue.TaggedOutput(DECISIONS, {
            "doc_id": doc_id, "source": source, "kept": reason is None, "reason": reason})
        if reason is not None:
            self._counters.filtered(reason, source)
            return
        self._counters.passed(source)
        yield {"doc_id": doc_id, "source": source, "domain": document["domain"],
               "license": document["license"], "url": document["url"], "text": document["text"]}
