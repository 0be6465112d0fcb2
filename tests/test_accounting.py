"""Tally: counts as data, and the runner's counters (live progress) fed in batches."""

import json

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.records.accounting import COUNTS, REPORT_EVERY, SumCounts, Tally

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
INCREMENTS = 2 * REPORT_EVERY + 17  # two batches reported on the way, the rest by take()


class _CountFn(beam.DoFn):
    def setup(self):
        self.tally = Tally("demo")

    def process(self, element):
        tally = self.tally
        tally.inc("failed_attempt", "src", 5)
        tally.discard()  # an attempt that failed: neither its counts nor its counters survive
        for i in range(INCREMENTS):
            tally.entered("src" if i % 2 else "other")
            tally.inc("plain")  # no source: no per-source counter
        yield from tally.tagged()


def _counters(result) -> dict[tuple[str, str], int]:
    found = result.metrics().query(MetricsFilter())["counters"]
    return {(r.key.metric.namespace, r.key.metric.name): r.committed for r in found}


def test_the_runners_counters_get_every_increment_and_the_counts_travel_as_data(tmp_path):
    p = beam.Pipeline(options=OPTIONS)
    counted = p | beam.Create([0]) | beam.ParDo(_CountFn()).with_outputs(COUNTS, main="main")
    summed = counted[COUNTS] | beam.CombineGlobally(SumCounts())
    out = tmp_path / "counts.txt"
    _ = summed | beam.Map(lambda c: out.write_text(json.dumps(sorted([*key, n] for key, n in c.items()))))
    result = p.run()
    result.wait_until_finish()
    half, rest = INCREMENTS // 2, INCREMENTS - INCREMENTS // 2
    assert json.loads(out.read_text()) == sorted(
        [["demo", "in", "src", half], ["demo", "in", "other", rest], ["demo", "plain", "", INCREMENTS]]
    )
    counters = _counters(result)
    assert counters[("demo", "in")] == INCREMENTS
    assert counters[("demo", "plain")] == INCREMENTS
    assert counters[("demo.source.src", "in")] == half
    assert counters[("demo.source.other", "in")] == rest
    assert not any(name == "failed_attempt" for _, name in counters)
    assert not any(namespace.endswith(".source.") for namespace, _ in counters)  # "plain" had no source
