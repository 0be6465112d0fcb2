"""Bounded output per bundle (beam_pipeline/transforms/bundle_budget.py): once a bundle has emitted its
budget, the rest of its work goes to later bundles, on the local runner and on embedded Flink, and what
comes out is the same for any budget: every item once, every count once.

The whole sample on embedded Flink with a budget small enough to defer in every reading step is
tests/test_flink_embedded.py (the reference dataset, byte for byte).
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.config.corpus import load_config
from beam_pipeline.options import flink_job_server_jar
from beam_pipeline.options.corpus_options import flink_defaults
from beam_pipeline.sources.snapshot import file_checksum, match_sources
from beam_pipeline.transforms.bundle_budget import (
    UNBOUNDED,
    BudgetedExpandFn,
    ResumableExpandFn,
    bundle_budget,
    output_bytes,
)
from beam_pipeline.transforms.ingest import ReadRecordsFn
from conftest import SAMPLE_CONFIG

#: element -> how many items of 100 bytes it expands to: ~10 kB in all
ELEMENTS = {"a": 40, "b": 7, "c": 0, "d": 53}


class _Items(ResumableExpandFn):
    """An element -> ``ELEMENTS[element]`` items (element, i, 100 bytes), and a count of them."""

    def start_bundle(self):
        super().start_bundle()
        self._counted = 0

    def items(self, element, start):
        for i in range(start, ELEMENTS[element]):
            self._counted += 1
            yield (element, i, "x" * 100)

    def settle(self):
        counted, self._counted = self._counted, 0
        yield beam.pvalue.TaggedOutput("counts", counted)


class _WholeItems(BudgetedExpandFn):
    def items(self, element, start):
        assert start == 0
        return ((element, i, "x" * 100) for i in range(ELEMENTS[element]))


def _run(fn, args: list[str]) -> int:
    """Run ``fn`` over ELEMENTS; fails unless every item comes out once and the counts add up to the
    items; returns how many times a bundle deferred work."""
    pipeline = beam.Pipeline(options=PipelineOptions(args))
    out = (
        pipeline
        | beam.Create(sorted(ELEMENTS), reshuffle=False)
        | beam.Reshuffle()
        | beam.ParDo(fn).with_outputs("counts", main="items")
    )
    expected = sorted((element, i) for element, n in ELEMENTS.items() for i in range(n))
    assert_that(out["items"] | "Ids" >> beam.Map(lambda item: item[:2]), equal_to(expected), label="EveryItemOnce")
    if isinstance(fn, _Items):
        total = out["counts"] | "Total" >> beam.CombineGlobally(sum)
        assert_that(total, equal_to([len(expected)]), label="CountedOnce")
    result = pipeline.run()
    result.wait_until_finish()
    return sum(
        c.committed or c.attempted or 0
        for c in result.metrics().query(MetricsFilter().with_namespace("bundle_budget"))["counters"]
    )


LOCAL = ["--runner=DirectRunner", "--direct_num_workers=1"]


@pytest.mark.parametrize("budget", [UNBOUNDED, 1, 250, 1000])
def test_a_resumable_expansion_emits_each_item_once_and_counts_it_once_for_any_budget(budget):
    deferred = _run(_Items(budget), LOCAL)
    if budget == UNBOUNDED:
        assert deferred == 0
    else:  # ~10 kB in bundles of `budget` bytes: at least one deferral per budget's worth
        assert deferred >= sum(ELEMENTS.values()) * 100 // max(budget, 100) // 2


def test_whole_elements_are_deferred_only_before_they_start():
    deferred = _run(_WholeItems(1), LOCAL)
    assert deferred >= len(ELEMENTS) - 1  # each bundle takes one element


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_on_embedded_flink_a_spent_budget_ends_the_bundle_and_the_rest_comes_in_later_bundles():
    """Flink's batch runner hands a task's whole input to one bundle; the deferred rest comes back in its
    SDF loop (FlinkExecutableStageFunction), as new bundles of the same task."""
    assert os.path.exists(flink_job_server_jar()), "run `make flink` (make test does) to assemble the job server"
    args = ["--runner=FlinkRunner", "--parallelism=2"]
    deferred = _run(_Items(250), args + flink_defaults(args))
    assert deferred >= 10


def test_the_local_runner_with_several_workers_gets_no_budget_it_would_lose_work_under():
    def budget(args):
        return bundle_budget(beam.Pipeline(options=PipelineOptions(args))).bytes

    assert budget(["--runner=DirectRunner", "--direct_num_workers=2"]) == UNBOUNDED
    assert budget(["--runner=DirectRunner", "--direct_num_workers=1", "--bundle_output_mb=2"]) == 2 << 20
    assert budget(["--runner=FlinkRunner"]) == 64 << 20  # the default
    with pytest.raises(ValueError, match="bundle_output_mb"):
        budget(["--runner=DirectRunner", "--direct_num_workers=1", "--bundle_output_mb=0"])


class _Failing(BudgetedExpandFn):
    def items(self, element, start):
        raise LookupError(f"no such thing as {element}")


class _Expand(beam.PTransform):
    def expand(self, pcoll):
        return pcoll | "Read" >> beam.ParDo(_Failing(bundle_budget(pcoll.pipeline)))


def test_an_error_names_its_step_as_beam_does_for_a_plain_dofn():
    """The driver finds the failed stage by the step in the error (stage_failure.failed_stage); Beam leaves it
    out of a splittable DoFn's errors, so the DoFn adds it."""
    with pytest.raises(LookupError, match=r"no such thing as a \[while running 'Stage[^']*'\]"):
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])) as p:
            _ = p | beam.Create(["a"]) | "Stage" >> _Expand()


def test_output_bytes_counts_text_and_vectors_without_walking_numbers():
    row = {"doc_id": "ab", "text": "x" * 1000, "n": 3}
    assert output_bytes(row) == 2 + 1000 + 8 + 3 * 8
    entry = 2 + 8 + 128 * 8 + 8  # doc id, layer, a signature of 128 numbers (not walked), the tuple
    assert output_bytes((7, [(b"id", 0, tuple(range(128)))])) == 8 + (entry + 8) + 8
    assert output_bytes(beam.pvalue.TaggedOutput("counts", "abc")) == 3


def test_ingest_resumes_a_file_at_a_record_without_counting_the_records_before_it():
    config = load_config(SAMPLE_CONFIG)
    sources = {s.name: s for s in config.sources}
    source = next(s for s in config.sources if s.format == "jsonl")
    path = next(m["path"] for m in match_sources(config) if m["source"] == source.name)
    entry = {"source": source.name, "path": path, "checksum": file_checksum(path, "sha256")}

    def read(start):
        fn = ReadRecordsFn(sources, config.ingest.max_record_bytes, UNBOUNDED)
        fn.setup()
        items = [item for item in fn.items(entry, start) if item is not None]
        counts = [c.value for c in fn.settle()]
        return items, counts

    whole, (whole_counts,) = read(0)
    assert len(whole) >= 3
    tail, (tail_counts,) = read(2)
    assert tail == whole[2:]
    entered = {key: value for key, value in whole_counts.items() if key[1] == "in"}
    entered_tail = {key: value for key, value in tail_counts.items() if key[1] == "in"}
    assert sum(entered.values()) - sum(entered_tail.values()) == 2
