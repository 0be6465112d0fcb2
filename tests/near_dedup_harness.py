"""Running the near-dedup stage in a real pipeline and committing its layer as the build does.

The stage goes through the build's own :class:`beam_pipeline.build.build_graph.StageTransform`
(rows through ``WriteLayerOutput``, partitions the stage's tasks wrote as they
are, counts and the commit through ``CommitLayer``), so a test sees exactly the
files and the ledger the build writes, without the rest of the build's graph.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sys

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.internal.cloudpickle import cloudpickle
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build import build_graph as build
from beam_pipeline.storage import schemas
from beam_pipeline.records.accounting import DEAD_LETTER
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.storage.layers import Layer, layer_key
from beam_pipeline.transforms import near_dedup
from beam_pipeline.transforms.layer_io import LayerSpec

# The workers of multi_processing do not have tests/ on their path: ship this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
MULTI_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def StageTransform(spec: LayerSpec, expand):  # noqa: N802 - stands for the build's transform
    """pbegin -> PCollection[Committed]: ``expand(pbegin)``'s outputs written and committed by the build's own
    :class:`beam_pipeline.build.build_graph.StageTransform`."""
    return build.StageTransform(spec, lambda pbegin, _layer: expand(pbegin))


def ingest_spec(root: str, config, snapshot_id: str, partitions: int) -> LayerSpec:
    """The ingest layer the build would make of a snapshot."""
    from beam_pipeline.transforms import ingest

    stage_config = ingest.stage_config(config)
    inputs = {"snapshot": snapshot_id}
    key = layer_key(ingest.STAGE, ingest.VERSION, stage_config, [*inputs.values(), str(partitions)])
    return LayerSpec(layer=Layer(root, ingest.STAGE, key), version=ingest.VERSION, config=stage_config,
                     inputs=inputs, outputs={ingest.DOCUMENTS: schemas.DOCUMENT, ingest.REPEATS: schemas.REPEAT,
                                             DEAD_LETTER: schemas.DEAD_LETTER},
                     partitions=partitions, rows_match={ingest.DOCUMENTS: "passed"},
                     max_dead_letter_fraction=config.accounting.max_dead_letter_fraction)


def add_ingest(pipeline, spec: LayerSpec, config, manifest: dict):
    """The ingest stage and its commit in ``pipeline``: PCollection[Committed]."""
    from beam_pipeline.transforms import ingest

    return pipeline | "ingest" >> StageTransform(spec, lambda pbegin: pbegin | "Ingest" >> ingest.IngestSnapshot(
        config, manifest, spec.layer.path, spec.partitions))


def near_dedup_spec(root: str, config: NearDedupConfig, input_key: str, partitions: int,
                    previous=(), max_dead_letter_fraction: float = 0.01) -> LayerSpec:
    """The near-dedup layer the build would make of an ingest layer (key, outputs, rows to match)."""
    stage_config = near_dedup.stage_config(config)
    inputs = {"documents": input_key, **{f"against.{i}": prev.key for i, prev in enumerate(previous)}}
    key = layer_key(near_dedup.STAGE, near_dedup.VERSION, stage_config, [*inputs.values(), str(partitions)])
    return LayerSpec(layer=Layer(root, near_dedup.STAGE, key), version=near_dedup.VERSION, config=stage_config,
                     inputs=inputs, outputs={**near_dedup.OUTPUTS, DEAD_LETTER: schemas.DEAD_LETTER},
                     partitions=partitions, rows_match={near_dedup.ANNOTATIONS: "passed"},
                     max_dead_letter_fraction=max_dead_letter_fraction)


def add_near_dedup(pipeline, spec: LayerSpec, config: NearDedupConfig, document_paths: list[str], previous=(),
                   after=()):
    """The stage and its commit in ``pipeline``: PCollection[Committed]."""
    return pipeline | "near_dedup" >> StageTransform(spec, lambda pbegin: near_dedup.build_stage(
        pbegin, config, list(document_paths), list(previous), spec.layer.path, after=after))


def run_near_dedup(root: str, config: NearDedupConfig, document_paths: list[str], *, input_key: str = "documents",
                   previous=(), options=IN_PROCESS, before_run=None, max_dead_letter_fraction: float = 0.01) -> Layer:
    """Build and commit a near-dedup layer of the given documents partitions in one job; return the layer."""
    spec = near_dedup_spec(root, config, input_key, len(document_paths), previous, max_dead_letter_fraction)
    pipeline = beam.Pipeline(options=PipelineOptions(options))
    add_near_dedup(pipeline, spec, config, document_paths, previous)
    if before_run:
        before_run(pipeline)
    pipeline.run().wait_until_finish()
    return spec.layer


def part_digests(layer: Layer, output: str) -> list[str]:
    """sha256 of every partition of an output of a committed layer, in partition order."""
    directory = layer.dead_letter_path if output == DEAD_LETTER else layer.output_path(output)
    return [hashlib.sha256(open(path, "rb").read()).hexdigest()
            for path in sorted(glob.glob(os.path.join(directory, "part-*.parquet")))]


def read_output(layer: Layer, output: str) -> list[dict]:
    directory = layer.dead_letter_path if output == DEAD_LETTER else layer.output_path(output)
    return [row for path in sorted(glob.glob(os.path.join(directory, "part-*.parquet")))
            for row in pq.read_table(path).to_pylist()]


def ledger(layer: Layer) -> dict:
    return json.loads(open(layer.ledger_path, encoding="utf-8").read())
