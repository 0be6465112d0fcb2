"""Progress lines while the build's job runs, and that they change nothing (beam_pipeline/build/progress.py)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time

import apache_beam as beam
from apache_beam.metrics.metric import MetricResult, Metrics
from apache_beam.metrics.execution import MetricKey
from apache_beam.metrics.metricbase import MetricName
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult
from apache_beam.runners.portability.portable_runner import PipelineResult as PortableResult

from beam_pipeline.build.corpus_build import CorpusBuild
from beam_pipeline.config.corpus import load_config
from beam_pipeline.storage.layers import Layer, commit_layer
from beam_pipeline.build.progress import BuildProgress, CountingFnApiRunner, is_local_direct
from conftest import IN_PROCESS, SAMPLE_CONFIG

LINE = re.compile(r"^\[(?P<stage>\w+)\] (?P<n>[\d,]+)( of (?P<total>[\d,]+))? records so far( \(\d+%\))?, "
                  r"[\d,.]+ records/s, (?P<t>[\dhms]+) elapsed(, ETA [\dhms]+)?$")
COMMITTED = re.compile(r"^\[(?P<stage>\w+)\] committed after [\d.]+s \(in (?P<in>\d+), passed (?P<passed>\d+), "
                       r"filtered (?P<filtered>\d+), dead letter (?P<dead>\d+)(; [\d.]+ (B|kB|MB|GB|TB) written)?\)$")


class _Metrics:
    def __init__(self, results):
        self.results = results

    def query(self, metrics_filter):
        return {"counters": [r for r in self.results
                             if r.key.metric.namespace in metrics_filter.namespaces
                             and r.key.metric.name in metrics_filter.names]}


class _RunningResult(DataflowPipelineResult):
    """A running Dataflow job's result: metrics readable before the end."""

    def __init__(self):  # no job, no runner: only metrics()
        self.value = None

    def metrics(self):
        if self.value is None:
            raise RuntimeError("not yet")
        key = MetricKey("Read", MetricName("ingest", "in"))
        other = MetricKey("Read", MetricName("ingest.source.web", "in"))
        return _Metrics([MetricResult(key, committed=None, attempted=self.value),
                         MetricResult(other, committed=None, attempted=10 ** 9)])


def _fast(progress: BuildProgress) -> BuildProgress:
    progress.LEDGER_POLL = 0.02
    return progress


def test_progress_polls_a_running_results_metrics(tmp_path):
    options = PipelineOptions(["--runner=DataflowRunner"])
    lines = []
    progress = _fast(BuildProgress(options, lines.append, 0.05))
    assert progress.runner() is None, "non-local runners are not replaced"
    progress.expect([("ingest", Layer(str(tmp_path), "ingest", "k"))])
    result = _RunningResult()
    with progress:
        progress.watch(result)
        time.sleep(0.2)
        result.value = 12345
        time.sleep(0.3)
    assert lines and all(LINE.match(line) for line in lines), lines  # nothing while the runner could not answer
    assert "[ingest] 12,345 records so far, " in lines[-1]


def test_a_commit_line_when_a_layer_is_committed(tmp_path):
    lines = []
    layer = Layer(str(tmp_path), "exact_dedup", "k")
    progress = _fast(BuildProgress(PipelineOptions(["--runner=FlinkRunner"]), lines.append, 0))
    progress.expect([("exact_dedup", layer), ("tokenize", Layer(str(tmp_path), "tokenize", "k"))])
    with progress:
        time.sleep(0.1)
        assert lines == []
        counts = {"in": 7, "passed": 5, "filtered": {"x": 1, "y": 1}, "dead_letter": 0}
        commit_layer(layer, version="1", config={}, inputs={}, outputs={}, counts=counts)
        time.sleep(0.2)
    (line,) = lines  # once, for the committed layer only
    match = COMMITTED.match(line)
    assert match and match.groupdict() == {"stage": "exact_dedup", "in": "7", "passed": "5", "filtered": "2",
                                           "dead": "0"}


class _PortableResult(PortableResult):
    """A portable job's result: its metrics() caches the first answer, so it must not be polled."""

    def __init__(self):
        self.calls = 0

    def metrics(self):
        self.calls += 1
        raise AssertionError("progress polled a portable result's metrics")


def test_progress_never_polls_a_portable_result(tmp_path):
    lines = []
    progress = _fast(BuildProgress(PipelineOptions(["--runner=FlinkRunner"]), lines.append, 0.05))
    progress.expect([("ingest", Layer(str(tmp_path), "ingest", "k"))])
    result = _PortableResult()
    with progress:
        progress.watch(result)
        time.sleep(0.3)
    assert result.calls == 0 and lines == []


def test_progress_off_prints_no_counts_and_keeps_the_direct_runner(tmp_path):
    lines = []
    progress = _fast(BuildProgress(PipelineOptions(IN_PROCESS), lines.append, 0))
    assert progress.runner() is None
    progress.expect([("ingest", Layer(str(tmp_path), "ingest", "k"))])
    with progress:
        time.sleep(0.1)
    assert lines == []
    assert is_local_direct(PipelineOptions([])) and not is_local_direct(PipelineOptions(["--runner=FlinkRunner"]))


#: In-flight counts need workers that run beside the runner (gRPC); ``in_memory`` runs each bundle inside
#: the runner's call, so there counts arrive per finished fused step only.
THREADED = ["--runner=DirectRunner", "--direct_running_mode=multi_threading", "--direct_num_workers=1"]


def test_local_runner_counts_finished_and_running_bundles(tmp_path):
    lines = []
    progress = _fast(BuildProgress(PipelineOptions(THREADED), lines.append, 0.1))
    progress.expect([("demo", Layer(str(tmp_path), "demo", "k"))])
    runner = progress.runner()
    assert isinstance(runner, CountingFnApiRunner)

    def slow(x):
        Metrics.counter("demo", "in").inc()
        time.sleep(0.02)
        return x

    with progress:
        with beam.Pipeline(runner=runner, options=PipelineOptions(THREADED)) as p:
            _ = p | beam.Create(range(60)) | beam.Map(slow)
    counts = [int(m.group("n").replace(",", "")) for m in map(LINE.match, lines) if m and m.group("n")]
    assert counts and counts == sorted(counts) and counts[-1] <= 60, lines
    assert progress.records_so_far("demo") == 60
    assert any(0 < c < 60 for c in counts), f"no count while the bundle was running: {lines}"


def test_build_prints_progress_and_the_dataset_id_is_unchanged(built, tmp_path):
    """Re-run the last stage of the reference build, on the default local runner, with progress every 0.3 s."""
    root = str(tmp_path / "out")
    shutil.copytree(built["root"], root)
    (ledger,) = glob.glob(os.path.join(root, "layers", "tokenize", "*", "_LEDGER.json"))
    before = json.load(open(ledger))
    os.remove(ledger)
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": root})
    lines = []
    local_default = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    result = CorpusBuild(config, PipelineOptions(local_default), snapshot_id=built["manifest"]["snapshot_id"],
                         log=lines.append, progress_interval=0.3).run()

    assert result.dataset_id == built["manifest"]["dataset_id"]
    after = json.load(open(ledger))
    assert after["shards"] == before["shards"] and after["counts"] == before["counts"]
    progress = [m for m in map(LINE.match, lines) if m and m.group("stage") == "tokenize"]
    assert progress, lines
    assert int(progress[-1].group("n").replace(",", "")) <= before["counts"]["in"]
    assert lines.index(progress[0].group(0)) > lines.index(next(l for l in lines if l.startswith("[tokenize] runs in")))
    (committed,) = [m for m in map(COMMITTED.match, lines) if m]  # the one layer this build computed
    assert committed.group("stage") == "tokenize" and int(committed.group("in")) == before["counts"]["in"]
