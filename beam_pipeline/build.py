"""Assembling and running a corpus build: the stage graph, layers and resume.

A build is a fixed sequence of stages, each a Beam job over the layers before
it::

    snapshot -> ingest -> exact_dedup -> near_dedup -> cascade scorers (scoring/cascade.py) -> select
             -> ngram_index (optional) -> tokenize -> dataset

For each stage the driver computes the layer key from (stage version, the
stage's slice of the config, input layer keys). A complete layer (its ledger
exists) is reused without running anything; otherwise the stage's job runs,
its counters are checked (``in == passed + filtered + dead_letter``), its
partitions are collected and the ledger is written last. A build killed at
any point therefore resumes at the first incomplete layer and produces the
same bytes. ``docs/decisions.md`` says why stages are separate jobs.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from typing import Callable

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from beam_pipeline import schemas

from beam_pipeline.scoring import cascade
from beam_pipeline.accounting import LOST_IN_JOIN, RecordsLost, check_outputs, check_stage, counts_from_result
from beam_pipeline.config import CorpusConfig
from beam_pipeline.hashing import digest_json
from beam_pipeline.layers import Layer, collect_partitions, commit_layer, join, layer_key, move, \
    clear_layer, read_bytes, remove_temporaries, write_json_atomic
from beam_pipeline.options.corpus_options import CorpusOptions
from beam_pipeline.manifest import MANIFEST, MANIFEST_FORMAT, dataset_id_of, dataset_path, shard_leaf
from beam_pipeline.progress import StageProgress
from beam_pipeline.snapshot import check_sources_match, check_unchanged, load_snapshot, take_snapshot
from beam_pipeline.transforms import exact_dedup, ingest, near_dedup, select, tokenize_shard
from beam_pipeline.transforms.layer_io import SPILL, PartitionInputs, WriteLayerOutput, \
    WrittenPartitions, remove_spills

DEAD_LETTER = "dead_letter"
_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception): ")


class StageFailed(RuntimeError):
    """A stage's job failed; the message names the stage and the root cause."""


@dataclasses.dataclass
class StageOutcome:
    stage: str
    layer: Layer
    version: str
    config_digest: str
    reused: bool
    counts: dict
    seconds: float
    ledger: dict
    attempts: int = 0  # runs of the stage's job in this build (0: reused)
    attempt_seconds: tuple = ()  # wall seconds of each run of the job


@dataclasses.dataclass
class BuildResult:
    run_id: str
    snapshot_id: str
    dataset_id: str
    dataset_path: str
    metrics_path: str
    stages: list[StageOutcome]
    manifest: dict


class CorpusBuild:
    """Runs the stages of one config against one snapshot, resuming from layers."""

    def __init__(self, config: CorpusConfig, pipeline_options: PipelineOptions, *,
                 snapshot_id: str | None = None, log: Callable[[str], None] = print,
                 before_run: Callable[[str, beam.Pipeline], None] | None = None,
                 assemble_reused: bool = False):
        self.config = config
        self.options = pipeline_options
        FileSystems.set_options(pipeline_options)  # the driver's own s3:// / gs:// calls (docs/s3.md)
        self.snapshot_id = snapshot_id
        self.log = log
        self.before_run = before_run  # sees each stage's pipeline before it runs (tests, tooling)
        self.assemble_reused = assemble_reused  # also hand before_run the (unrun) graphs of reused layers
        self.root = config.output_root

    # --- the graph ----------------------------------------------------------

    def run(self) -> BuildResult:
        started = time.monotonic()
        snapshot_id, manifest = self._snapshot()
        partitions = partition_count(estimated_text_bytes(manifest), self.config.layout.target_partition_bytes,
                                     self.config.layout.min_partitions)
        tokenizer = tokenize_shard.inspect_tokenizer(self.config.tokenize)

        ingested = self._stage(
            ingest.STAGE, ingest.VERSION, ingest.stage_config(self.config), {"snapshot": snapshot_id},
            outputs={ingest.DOCUMENTS: schemas.DOCUMENT, ingest.REPEATS: schemas.REPEAT},
            partitions=partitions, rows_match={ingest.DOCUMENTS: "passed"},
            build=lambda p, layer: p | "Ingest" >> ingest.IngestSnapshot(self.config, manifest, layer.path, partitions),
            finalize=lambda layer: remove_spills(layer.path))

        inputs_of_select = {"documents": ingested.layer.key}
        exact = None
        if self.config.exact_dedup.enabled:
            exact = self._stage(
                exact_dedup.STAGE, exact_dedup.VERSION, self.config.exact_dedup.model_dump(mode="json"),
                {"documents": ingested.layer.key},
                outputs={exact_dedup.ANNOTATIONS: schemas.EXACT_DEDUP}, partitions=partitions,
                rows_match={exact_dedup.ANNOTATIONS: "passed"},
                build=lambda p, layer: {exact_dedup.ANNOTATIONS: WrittenPartitions(
                    p | "ExactDedup" >> exact_dedup.AnnotateExactDuplicates(
                        ingested.layer.part_paths(ingest.DOCUMENTS), layer.output_path(exact_dedup.ANNOTATIONS),
                        join(layer.path, SPILL)))},
                finalize=lambda layer: remove_spills(layer.path))
            inputs_of_select["exact"] = exact.layer.key

        near = None
        if self.config.near_dedup.enabled:
            previous = [near_dedup.resolve_against(self.root, entry, self.config.near_dedup)
                        for entry in self.config.near_dedup.against]
            near = self._stage(
                near_dedup.STAGE, near_dedup.VERSION, near_dedup.stage_config(self.config.near_dedup),
                {"documents": ingested.layer.key, **{f"against.{i}": prev.key for i, prev in enumerate(previous)}},
                outputs=near_dedup.OUTPUTS, partitions=partitions, rows_match={near_dedup.ANNOTATIONS: "passed"},
                build=lambda p, layer: near_dedup.build_stage(
                    p, self.config.near_dedup, ingested.layer.part_paths(ingest.DOCUMENTS), previous, layer.path),
                finalize=lambda layer: remove_spills(layer.path))
            inputs_of_select["near"] = near.layer.key

        scored = cascade.run_scorers(self, ingested, exact, near, partitions)  # cascade.stages, in order
        inputs_of_select.update({s.stage: s.layer.key for s in scored})

        def build_select(p, layer):
            annotations = {}
            if exact is not None:
                annotations["exact"] = (exact.layer.part_paths(exact_dedup.ANNOTATIONS), None)
            if near is not None:
                annotations["near"] = (near.layer.part_paths(near_dedup.ANNOTATIONS), None)
            annotations.update(cascade.score_inputs(scored, self.config))
            inputs = PartitionInputs.of(ingested.layer.part_paths(ingest.DOCUMENTS), None, annotations,
                                        required=cascade.ANNOTATE_EVERY_DOCUMENT)
            return p | "Select" >> select.ApplyPolicy(
                self.config.policy, cascade.plan_of(self.config), inputs,
                {output: layer.output_path(output) for output in (select.GOLD, select.DECISIONS)})

        selected = self._stage(
            select.STAGE, select.VERSION, cascade.select_config(self.config), inputs_of_select,
            outputs={select.GOLD: schemas.GOLD, select.DECISIONS: schemas.DECISION}, partitions=partitions,
            build=build_select, rows_match={select.GOLD: "passed", select.DECISIONS: "in"})

        indexed = cascade.run_index(self, selected, partitions)  # decontamination.index: n-grams of the gold text

        tokenize_config = {**self.config.tokenize.model_dump(mode="json", exclude={"tokenizer", "batch_size"}),
                           "tokenizer_sha256": tokenizer.sha256, "seed": self.config.seed}
        tokenized = self._stage(
            tokenize_shard.STAGE, tokenize_shard.VERSION, tokenize_config, {"gold": selected.layer.key},
            outputs={}, partitions=partitions,
            build=lambda p, layer: p | "TokenizePackShard" >> tokenize_shard.TokenizePackShard(
                self.config.tokenize, tokenizer, self.config.seed, layer.output_path("shards"),
                tuple(selected.layer.part_paths(select.GOLD)), join(layer.path, SPILL)),
            finalize=self._collect_shards)

        stages = [s for s in (ingested, exact, near, *scored, selected, indexed, tokenized) if s is not None]
        manifest_out = self._publish(snapshot_id, tokenizer, stages)
        from beam_pipeline.dataset.lineage import write_lineage  # one row per ingested record (docs/format.md)
        write_lineage(self.root, manifest_out, log=self.log)
        run_id = digest_json({"snapshot": snapshot_id, "config": self.config.digest()})[:16]
        metrics_path = self._write_run_metrics(run_id, snapshot_id, manifest_out, stages,
                                               time.monotonic() - started)
        return BuildResult(run_id=run_id, snapshot_id=snapshot_id, dataset_id=manifest_out["dataset_id"],
                           dataset_path=dataset_path(self.root, manifest_out["dataset_id"]),
                           metrics_path=metrics_path, stages=stages, manifest=manifest_out)

    # --- steps --------------------------------------------------------------

    def _snapshot(self) -> tuple[str, dict]:
        if self.snapshot_id:
            manifest = load_snapshot(self.root, self.snapshot_id)
            check_sources_match(self.config, manifest)
            snapshot_id = self.snapshot_id
            self.log(f"[snapshot] using pinned snapshot {snapshot_id}")
        else:
            self.log("[snapshot] fingerprinting inputs ...")
            snapshot_id, manifest = take_snapshot(self.config, self.options)
            files = sum(len(s["files"]) for s in manifest["sources"].values())
            self.log(f"[snapshot] {snapshot_id}: {files} files, {manifest['total_bytes']} bytes")
        check_unchanged(manifest)
        return snapshot_id, manifest

    def _stage(self, stage: str, version: str, stage_config, inputs: dict[str, str], *,
               outputs: dict[str, pa.Schema], partitions: int, build, finalize=None,
               rows_match: dict[str, str] | None = None) -> StageOutcome:
        """Reuse the stage's layer if complete, else run its job and commit the layer.

        ``rows_match`` maps an output to the counter its row count must equal
        (``accounting.check_outputs``); the dead letter always matches ``dead_letter``.
        """
        # The partition count is part of the key: a layer of another layout is never reused.
        key = layer_key(stage, version, stage_config,
                        [f"{k}={v}" for k, v in inputs.items()] + [f"partitions={partitions}"])
        layer = Layer(self.root, stage, key)
        config_digest = digest_json(stage_config)
        if layer.is_complete():
            ledger = layer.ledger()
            self.log(f"[{stage}] layer {key} is complete: reused ({_brief(ledger['counts'])})")
            if self.before_run and self.assemble_reused:  # the graph for tooling (Dataflow dry run); not run
                self.before_run(stage, self._assemble(layer, build, outputs, partitions, None)[0])
            return StageOutcome(stage, layer, version, config_digest, True, ledger["counts"], 0.0, ledger)

        self.log(f"[{stage}] running -> {layer.path}")
        started = time.monotonic()
        stale = remove_temporaries(layer)  # a killed run's half-written files
        if stale:
            self.log(f"[{stage}] removed {len(stale)} half-written file(s) of an interrupted run")
        attempts = self.options.view_as(CorpusOptions).max_stage_attempts
        expected = {**(rows_match or {}), DEAD_LETTER: "dead_letter"}
        attempt_seconds = []
        for attempt in range(1, attempts + 1):
            attempt_started = time.monotonic()
            try:
                counts, parts = self._run_job(stage, layer, build, outputs, partitions, expected)
                attempt_seconds.append(round(time.monotonic() - attempt_started, 3))
                break
            except RecordsLost as err:
                attempt_seconds.append(round(time.monotonic() - attempt_started, 3))
                if attempt == attempts:
                    raise
                self.log(f"[{stage}] WARNING: attempt {attempt} of {attempts}: {err}. The layer is not "
                         f"committed; its files are deleted and the stage's job runs again.")
                clear_layer(layer)
        extra = finalize(layer) if finalize else None
        seconds = time.monotonic() - started
        ledger = commit_layer(layer, version=version, config=stage_config, inputs=inputs, outputs=parts,
                              counts=counts, extra=extra)
        self.log(f"[{stage}] done in {seconds:.1f}s ({_brief(counts)})")
        return StageOutcome(stage, layer, version, config_digest, False, counts, seconds, ledger, attempt,
                            tuple(attempt_seconds))

    def _run_job(self, stage: str, layer: Layer, build, outputs: dict[str, pa.Schema], partitions: int,
                 expected: dict[str, str]) -> tuple[dict, dict]:
        """One run of a stage's job: (counts, partitions per output), all accounted for."""
        progress = StageProgress(stage, self.options, self.log)  # '[stage] N records so far' lines
        pipeline, produced = self._assemble(layer, build, outputs, partitions, progress.runner())
        if self.before_run:
            self.before_run(stage, pipeline)
        try:
            with progress:
                result = pipeline.run()
                progress.watch(result)
                state = result.wait_until_finish()
        except Exception as err:  # noqa: BLE001 - runners wrap worker errors in many types
            cause = root_cause(err)
            if LOST_IN_JOIN in cause:
                raise RecordsLost(f"stage {stage}: {cause}") from err
            raise StageFailed(f"stage {stage} failed: {cause}") from err
        if state != PipelineState.DONE:
            raise StageFailed(f"stage {stage}: the job ended in state {state}")

        counts = counts_from_result(result, stage)
        check_stage(stage, counts, self.config.accounting.max_dead_letter_fraction)
        remove_temporaries(layer)  # writes of bundle attempts that failed and were retried
        parts = {name: collect_partitions(layer.output_path(name), partitions, schema)
                 for name, schema in outputs.items()}
        if DEAD_LETTER in produced:
            parts[DEAD_LETTER] = collect_partitions(layer.dead_letter_path, 1, schemas.DEAD_LETTER)
        rows = {name: sum(part["rows"] for part in output) for name, output in parts.items()}
        if sum(rows.values()) and not counts["in"]:  # 0 == 0 + 0 + 0 would pass the accounting check
            raise StageFailed(f"stage {stage}: the job wrote {sum(rows.values())} rows but the runner reported "
                              f"no '{stage}' metrics (in=0); the accounting needs Beam metrics from the runner")
        check_outputs(stage, counts, rows, expected)
        return counts, parts

    def _assemble(self, layer: Layer, build, outputs: dict[str, pa.Schema], partitions: int, runner):
        """A stage's pipeline: its transforms, then a writer per output and for the dead letter."""
        pipeline = beam.Pipeline(runner=runner, options=self.options)
        produced = build(pipeline, layer)
        if not isinstance(produced, dict):
            produced = {"_result": produced}
        for name, schema in outputs.items():
            if not isinstance(produced[name], WrittenPartitions):  # else the stage's tasks wrote it
                produced[name] | f"Write_{name}" >> WriteLayerOutput(layer.output_path(name), schema, partitions)
        if DEAD_LETTER in produced:
            produced[DEAD_LETTER] | "Write_dead_letter" >> WriteLayerOutput(
                layer.dead_letter_path, schemas.DEAD_LETTER, 1, sort_key=_dead_letter_order,
                partition_key=lambda row: row["file"] or "")
        return pipeline, produced

    def _collect_shards(self, layer: Layer) -> dict:
        remove_spills(layer.path)
        directory = layer.output_path("shards")
        metas = [json.loads(read_bytes(m.path))
                 for m in FileSystems.match([join(directory, "*.meta.json")])[0].metadata_list]
        shards = sorted(metas, key=lambda s: s["name"])
        return {"shards": shards, "dataset_id": dataset_id_of(shards)}

    def _publish(self, snapshot_id: str, tokenizer, stages: list[StageOutcome]) -> dict:
        """Move the shards into ``datasets/<dataset_id>/`` and write the manifest last."""
        tokenized = stages[-1]
        dataset_id = tokenized.ledger["dataset_id"]
        shards = tokenized.ledger["shards"]
        target = dataset_path(self.root, dataset_id)
        staged = tokenized.layer.output_path("shards")
        for shard in shards:
            for field in ("tokens_file", "index_file"):
                src, dst = join(staged, shard[field]), join(target, "shards", shard[field])
                if not FileSystems.exists(dst):
                    move(src, dst)
        manifest = {
            "format": MANIFEST_FORMAT,
            "dataset_id": dataset_id,
            "name": self.config.name,
            "snapshot_id": snapshot_id,
            "config_digest": self.config.digest(),
            "config": self.config.model_dump(mode="json"),
            "seed": self.config.seed,
            "seq_len": self.config.tokenize.seq_len,
            "tokenizer": {**dataclasses.asdict(tokenizer), "dtype": tokenizer.dtype},
            "stages": [{"name": s.stage, "version": s.version, "layer_key": s.layer.key,
                        "config_digest": s.config_digest, "counts": s.counts} for s in stages],
            "shards": [{**s, "tokens_file": f"shards/{s['tokens_file']}", "index_file": f"shards/{s['index_file']}",
                        "leaf": shard_leaf(s)} for s in shards],
            "merkle": {"hash": "sha256", "leaf": "sha256(canonical_json({name, tokens_sha256, index_sha256}))",
                       "order": "shard name", "root": dataset_id},
        }
        write_json_atomic(join(target, MANIFEST), manifest)
        return manifest

    def _write_run_metrics(self, run_id, snapshot_id, manifest, stages, seconds) -> str:
        path = join(self.root, "runs", run_id, "metrics.json")
        write_json_atomic(path, {
            "run_id": run_id, "snapshot_id": snapshot_id, "dataset_id": manifest["dataset_id"],
            "config_digest": self.config.digest(),
            "stages": [{"name": s.stage, "layer_key": s.layer.key, "version": s.version, "reused": s.reused,
                        "attempts": s.attempts, "attempt_seconds": list(s.attempt_seconds),
                        "counts": s.counts} for s in stages],
            # Timings describe this run, not the data: they never reach a dataset or layer.
            "timing_seconds": {"total": round(seconds, 3), **{s.stage: round(s.seconds, 3) for s in stages}},
        })
        return path


# How many bytes of records a stored byte holds, by file suffix: text compresses ~3-6x
# with gzip or zstd (the scale benchmark's zstd JSONL: 5.3x), and Parquet pages are
# compressed too. Only the partition count depends on it, never the bytes of a row.
COMPRESSED_EXPANSION = 4
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz", ".parquet")


def estimated_text_bytes(manifest: dict) -> int:
    """Uncompressed input size of a snapshot, estimated from its file sizes and suffixes."""
    return sum(f["size"] * (COMPRESSED_EXPANSION if f["path"].lower().endswith(COMPRESSED_SUFFIXES) else 1)
               for source in manifest["sources"].values() for f in source["files"])


def partition_count(input_bytes: int, target_partition_bytes: int, min_partitions: int) -> int:
    """Layer partitions for a snapshot: fixed by the data and the config, never by the runner.

    A layer writer holds one partition's rows in memory to sort them, so the
    partition count grows with the input: that is what keeps a worker's memory
    flat as the corpus grows (bench/results/scale-*.md).
    """
    return max(min_partitions, math.ceil(input_bytes / target_partition_bytes))


def root_cause(err: BaseException) -> str:
    """The innermost ``SomeError: message`` line of a (runner-wrapped) exception."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if _ERROR_LINE.match(line)]
    return (causes[-1] if causes else (lines[-1] if lines else type(err).__name__))[:4000]


def _dead_letter_order(row: dict) -> tuple:
    return (row["file"] or "", row["position"] if row["position"] is not None else -1,
            row["doc_id"] or "", row["error"])


def _brief(counts: dict) -> str:
    filtered = sum(counts["filtered"].values())
    return f"in {counts['in']}, passed {counts['passed']}, filtered {filtered}, dead letter {counts['dead_letter']}"
