"""Stages 3, 5, 6: the scorers of the cascade, one fused pass and one layer each.

The scorers that a build computes run in one pass over the text, one task per
layer partition::

    partition i of: documents (ingest) ─┐                 ┌─ gate ─ score stage k ─> annotations of k, partition i
                    exact, near         ├─ merge join ─────┤   (the rows of stages < k, reused or just computed,
                    reused scorer layers┘   on doc_id      │    are what the gate of k reads)
                                                           └─> dead letters of k (a scorer raised)

* The join needs no shuffle: all layers of a build are partitioned and sorted
  by doc_id alike (:class:`beam_pipeline.transforms.layer_io.PartitionInputs`),
  so a worker holds one partition at a time and the runner moves no text.
* Each scorer still writes its own layer (its own key, ledger and counts), so
  a threshold that gates stage *k* re-runs stages *k*.. only, and a scorer
  layer committed by an earlier run is read, not recomputed
  (:meth:`beam_pipeline.build.build_graph.BuildGraph.stage_group`).
* The *gate* of stage *k* is the policy as far as it is known before it
  (:meth:`beam_pipeline.policy.rules.Plan.first_reason` up to the stage, after
  the built-in rules of :func:`beam_pipeline.policy.decision.decide`). A document the
  gate stops is counted ``filtered:<reason>`` and gets no row: its scores are
  absent (null when joined), never invented. With ``cascade.gate: false``
  every document is scored.
* Scorers that need an earlier layer as input (heuristics and safety read
  ``language.lang``) get its row the same way.
* Text is what ``select`` will write: boilerplate lines and repeated spans
  that near dedup marked are stripped first (``repetition.stripped_document``).
* Models and lists are loaded once per worker process in ``DoFn.setup``
  through :class:`apache_beam.utils.shared.Shared`.

Counts (per scorer stage, as data): ``in`` every document, ``passed`` scored,
``filtered:<gate reason>``, ``dead_letter``. The pure scoring functions are in
:mod:`beam_pipeline.filters`; each ``Scorer`` below only adapts one of them.
"""

from __future__ import annotations

import abc
from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils import shared

from beam_pipeline.records.accounting import Tally
from beam_pipeline.records.hashing import digest_json, sha256_stream
from beam_pipeline.storage import schemas
from beam_pipeline.transforms.gate import Gate
from beam_pipeline.transforms.layer_io import (
    TASK_RECORDS,
    PartitionIndexes,
    PartitionInputs,
    write_layer_partition,
)
from beam_pipeline.transforms.task_ledger import TaskLedger

ANNOTATIONS = "annotations"
DEAD_LETTER = "dead_letter"
DOCUMENT_COLUMNS = ["doc_id", "source", "domain", "url", "license", "date", "n_chars", "text"]


class ScoreCascade(beam.PTransform):
    """pbegin -> {stage: {"task_records": PCollection of its task records}} of the scorers in ``scorers``
    (in cascade order), all computed by one task per partition. A task writes partition ``i`` of every
    scorer's annotations and yields their task records (sidecar, counts, dead letters: what the commit
    of each layer reads, :class:`~beam_pipeline.transforms.layer_io.CommitTaskRecordsFn`).

    ``scorers``: (Scorer, Gate or None, annotations directory) per stage to compute;
    ``inputs`` names the documents and the layers to join (exact, near, scorer
    layers committed earlier); ``after``: the Committed collections of those layers.
    """

    def __init__(self, scorers: list[tuple["Scorer", "Gate | None", str]], inputs: PartitionInputs, after=()):
        super().__init__()
        self._scorers = list(scorers)
        self._inputs = inputs
        self._after = tuple(after)
        self._shared = shared.Shared()

    def expand(self, pbegin):
        records = (
            pbegin
            | "Partitions" >> PartitionIndexes(self._inputs.count, self._after)
            | "JoinGateScoreAndWrite" >> beam.ParDo(ScoreCascadeFn(self._scorers, self._shared, self._inputs))
        )
        return {
            scorer.stage: {TASK_RECORDS: records | f"TaskRecords_{scorer.stage}" >> beam.Map(_record_of, scorer.stage)}
            for scorer, _, _ in self._scorers
        }


def _record_of(records: dict, stage: str) -> dict:
    return records[stage]


def prepared_document(document: dict, near: dict | None, policy) -> dict:
    """The document as select will judge and write it (near-dedup stripping applied)."""
    if near is None:
        return document
    from beam_pipeline.dedup.repetition import stripped_document

    return stripped_document(
        document,
        near,
        strip_lines=getattr(policy, "strip_boilerplate_lines", True),
        strip_spans=getattr(policy, "strip_repeated_spans", True),
    )


class _Holder:
    """A weak-referenceable box for what a scorer loads (Shared keeps weak references)."""

    def __init__(self, value):
        self.value = value


class ScoreCascadeFn(beam.DoFn):
    """partition index -> {stage: its task record} (transforms/task_ledger.py): the sidecar of its
    annotations partition (written here), its counts and its dead letters, for each scorer."""

    def __init__(
        self, scorers: list[tuple["Scorer", Gate | None, str]], shared_handle: shared.Shared, inputs: PartitionInputs
    ):
        self._scorers = scorers
        self._shared = shared_handle
        self._inputs = inputs

    def setup(self):
        self._models = [
            self._shared.acquire(lambda scorer=scorer: _Holder(scorer.load()), tag=scorer.tag())
            for scorer, _, _ in self._scorers
        ]
        self._tallies = {scorer.stage: Tally(scorer.stage) for scorer, _, _ in self._scorers}

    def process(self, index: int) -> Iterator:
        count = self._inputs.count
        ledgers = [TaskLedger(directory.rsplit("/", 1)[0], count) for _, _, directory in self._scorers]
        records = [ledger.done(index) for ledger in ledgers]
        if all(records):  # finished by an earlier, killed run of these layers (transforms/task_ledger.py)
            yield {scorer.stage: record for (scorer, _, _), record in zip(self._scorers, records)}
            return
        annotations = {scorer.stage: [] for scorer, _, _ in self._scorers}
        dead_letters = {scorer.stage: [] for scorer, _, _ in self._scorers}
        where = "+".join(annotations)
        policy = self._scorers[0][1].policy if self._scorers[0][1] is not None else self._scorers[0][0].policy
        for document, rows in self._inputs.joined(index, where):
            document = prepared_document(document, rows.get("near"), policy)
            rows["document"] = document
            for (scorer, gate, _directory), holder in zip(self._scorers, self._models):
                row = None
                for out in self.score_one(scorer, gate, holder, document, rows):
                    if isinstance(out, beam.pvalue.TaggedOutput):
                        dead_letters[scorer.stage].append(out.value)
                    else:
                        row = out
                        annotations[scorer.stage].append(out)
                rows[scorer.stage] = row
        finished = {}
        for (scorer, _gate, directory), ledger in zip(self._scorers, ledgers):
            sidecar = write_layer_partition(directory, index, count, annotations[scorer.stage], scorer.schema)
            counts = self._tallies[scorer.stage].take()
            finished[scorer.stage] = ledger.write(index, {ANNOTATIONS: sidecar}, counts, dead_letters[scorer.stage])
        yield finished

    def score_one(self, scorer: "Scorer", gate: Gate | None, holder: _Holder, document: dict, rows: dict) -> Iterator:
        """Gate and score one document: its annotation row, a dead letter, or nothing (gated)."""
        tally = self._tallies[scorer.stage]
        source = document["source"]
        tally.entered(source)
        if gate is not None:
            reason = gate.reason(document, rows)
            if reason is not None:
                tally.filtered(reason, source)
                return
        try:
            scores = scorer.score(holder.value, document, rows)
        except Exception as err:  # noqa: BLE001 - one bad document must not fail the stage
            tally.dead_letter(source)
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTER,
                schemas.dead_letter_row(
                    scorer.stage,
                    source=source,
                    doc_id=document["doc_id"],
                    error=f"{type(err).__name__}: {err}",
                    raw_prefix=document["text"][:256].encode("utf-8"),
                ),
            )
            return
        tally.passed(source)
        yield {"doc_id": document["doc_id"], "source": source, **scores}


# --- scorers ------------------------------------------------------------------------


def file_sha256(path: str) -> str:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return sha256_stream(f)


class Scorer(abc.ABC):
    """Adapts one family of :mod:`beam_pipeline.filters` to a cascade stage."""

    stage = ""
    version = "1"
    schema = None
    #: earlier cascade layers whose row the scorer reads (when they run before it)
    context: tuple[str, ...] = ()

    def __init__(self, config, cascade_before: tuple[str, ...] = ()):
        self.config = config
        self.policy = config.policy
        self.cascade_before = tuple(cascade_before)

    def key_config(self) -> dict:
        """What determines this scorer's output for a given document (part of the layer key)."""
        return {}

    def tag(self) -> str:
        return digest_json({"stage": self.stage, "version": self.version, "config": self.key_config()})

    def load(self):
        return None

    @abc.abstractmethod
    def score(self, state, document: dict, rows: dict) -> dict:
        """Named scores of one document; ``state`` is what :meth:`load` returned."""

    def context_columns(self) -> dict[str, list[str]]:
        return {}


class LanguageScorer(Scorer):
    stage, schema = "language", schemas.LANGUAGE

    def key_config(self):
        from beam_pipeline.filters.language import model_path

        c = self.config.language
        return {
            "model_sha256": file_sha256(model_path(c.model)),
            "paragraphs": c.paragraphs,
            "min_paragraph_chars": c.min_paragraph_chars,
            "max_chars": c.max_chars,
        }

    def load(self):
        from beam_pipeline.filters.language import load_model, model_path

        return load_model(model_path(self.config.language.model))

    def score(self, model, document, rows):
        from beam_pipeline.filters import language

        c = self.config.language
        return language.score(
            model,
            document["text"],
            paragraphs=c.paragraphs,
            min_paragraph_chars=c.min_paragraph_chars,
            max_chars=c.max_chars,
        )


def _language_of(rows: dict) -> str | None:
    row = rows.get("language")
    return None if row is None else row.get("lang")


class HeuristicsScorer(Scorer):
    stage, schema = "heuristics", schemas.HEURISTICS
    context = ("language",)

    def key_config(self):
        return {**self.config.heuristics.model_dump(mode="json"), "language_known": "language" in self.cascade_before}

    def context_columns(self):
        return {"language": ["lang"]} if "language" in self.cascade_before else {}

    def score(self, _state, document, rows):
        from beam_pipeline.filters import heuristics

        c = self.config.heuristics
        return heuristics.score(document["text"], _language_of(rows), **c.score_options())


class BlocklistScorer(Scorer):
    stage, schema = "blocklist", schemas.BLOCKLIST

    def key_config(self):
        c = self.config.blocklist
        return {
            "domain_files_sha256": [file_sha256(p) for p in c.domain_files],
            "url_substring_files_sha256": [file_sha256(p) for p in c.url_substring_files],
        }

    def load(self):
        from beam_pipeline.filters.blocklist import Blocklist

        c = self.config.blocklist
        return Blocklist.from_files(c.domain_files, c.url_substring_files)

    def score(self, blocklist, document, rows):
        return blocklist.score(document["url"])


class QualityScorer(Scorer):
    stage, schema = "quality", schemas.QUALITY

    def key_config(self):
        return {"model_sha256": file_sha256(self.config.quality.model)}

    def load(self):
        from beam_pipeline.filters.language import load_model

        return load_model(self.config.quality.model)

    def score(self, model, document, rows):
        from beam_pipeline.filters.quality_model import positive_probability

        return {"score": positive_probability(model, document["text"])}


class SafetyScorer(Scorer):
    stage, schema = "safety", schemas.SAFETY
    context = ("language",)

    def key_config(self):
        c = self.config.safety
        return {
            "builtin_badwords": c.builtin_badwords,
            "badword_files_sha256": {k: file_sha256(v) for k, v in sorted(c.badword_files.items())},
            "toxicity_model_sha256": file_sha256(c.toxicity_model) if c.toxicity_model else None,
            "builtin_lists_sha256": _builtin_lists_digest() if c.builtin_badwords else None,
        }

    def context_columns(self):
        return {"language": ["lang"]}

    def load(self):
        from beam_pipeline.filters.language import load_model
        from beam_pipeline.filters.safety import BadWords, load_word_lists

        c = self.config.safety
        badwords = BadWords(load_word_lists(c.builtin_badwords, c.badword_files))
        return badwords, (load_model(c.toxicity_model) if c.toxicity_model else None)

    def score(self, state, document, rows):
        from beam_pipeline.filters.quality_model import positive_probability

        badwords, toxicity_model = state
        out = badwords.score(document["text"], _language_of(rows))
        out["toxicity"] = positive_probability(toxicity_model, document["text"]) if toxicity_model else None
        return out


def _builtin_lists_digest() -> str:
    from beam_pipeline.filters.safety import BUILTIN_LANGUAGES, builtin_words

    return digest_json({lang: builtin_words(lang) for lang in sorted(BUILTIN_LANGUAGES)})


class PiiScorer(Scorer):
    stage, schema = "pii", schemas.PII

    def key_config(self):
        return self.config.pii.model_dump(mode="json")

    def score(self, _state, document, rows):
        from beam_pipeline.filters.pii import counts

        return counts(document["text"], self.config.pii.kinds)


class DecontaminationScorer(Scorer):
    stage, schema = "decontamination", schemas.DECONTAMINATION

    def key_config(self):
        from beam_pipeline.filters.decontamination import INDEX_FORMAT

        c = self.config.decontamination
        return {
            "ngram": c.ngram,
            "min_overlap": c.min_overlap,
            "hash": INDEX_FORMAT,
            "evalsets": [{"name": e.name, "field": e.field, "sha256": file_sha256(e.path)} for e in c.evalsets],
        }

    def load(self):
        from beam_pipeline.filters.decontamination import build_evalset, read_items

        c = self.config.decontamination
        return [build_evalset(e.name, read_items(e.path, e.field), c.ngram) for e in c.evalsets], {}

    def score(self, state, document, rows):
        from beam_pipeline.filters.decontamination import score

        evalsets, cache = state
        if len(cache) > 1_000_000:  # word-hash cache: bounded memory per worker
            cache.clear()
        c = self.config.decontamination
        return score(evalsets, document["text"], c.ngram, c.min_overlap, cache)


SCORERS: dict[str, type[Scorer]] = {
    cls.stage: cls
    for cls in (
        LanguageScorer,
        HeuristicsScorer,
        BlocklistScorer,
        QualityScorer,
        SafetyScorer,
        PiiScorer,
        DecontaminationScorer,
    )
}


# --- histogram summaries for the ledger ------------------------------------------------

HISTOGRAM_BINS = 10
TOP_VALUES = 10


def histograms(part_paths: list[str], schema) -> dict:
    """Per column: counts, nulls and a fixed-bin histogram (numbers), true/false counts (flags)
    or the most frequent values (text), overall and per source. Deterministic: computed from
    the layer's own partitions, never from timings or sampling."""
    import pyarrow as pa

    from beam_pipeline.storage.layers import read_parquet

    tables = []
    for path in part_paths:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            tables.append(read_parquet(f))
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    sources = table.column("source").to_pylist()
    out = {}
    for field in schema:
        if field.name in ("doc_id", "source"):
            continue
        values = table.column(field.name).to_pylist()
        by_source: dict[str, list] = {}
        for source, value in zip(sources, values):
            by_source.setdefault(source, []).append(value)
        if pa.types.is_boolean(field.type):
            summarize = _flags
        elif pa.types.is_integer(field.type) or pa.types.is_floating(field.type):
            present = [v for v in values if v is not None]
            low, high = (min(present), max(present)) if present else (0.0, 0.0)
            if 0.0 <= low and high <= 1.0 and pa.types.is_floating(field.type):
                low, high = 0.0, 1.0
            summarize = _numbers(float(low), float(high))
        else:
            summarize = _text
        out[field.name] = {
            "all": summarize(values),
            "by_source": {s: summarize(v) for s, v in sorted(by_source.items())},
        }
    return out


def _flags(values: list) -> dict:
    return {
        "rows": len(values),
        "null": values.count(None),
        "true": sum(v is True for v in values),
        "false": sum(v is False for v in values),
    }


def _numbers(low: float, high: float):
    width = (high - low) / HISTOGRAM_BINS

    def summarize(values: list) -> dict:
        present = [v for v in values if v is not None]
        counts = [0] * HISTOGRAM_BINS
        for v in present:
            i = 0 if width == 0 else min(HISTOGRAM_BINS - 1, int((v - low) / width))
            counts[i] += 1
        return {
            "rows": len(values),
            "null": len(values) - len(present),
            "mean": round(sum(present) / len(present), 6) if present else None,
            "min": round(min(present), 6) if present else None,
            "max": round(max(present), 6) if present else None,
            "edges": [round(low + i * width, 6) for i in range(HISTOGRAM_BINS + 1)],
            "counts": counts,
        }

    return summarize


def _text(values: list) -> dict:
    counts: dict[str, int] = {}
    for v in values:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_VALUES]
    return {"rows": len(values), "null": values.count(None), "distinct": len(counts), "top": dict(top)}
