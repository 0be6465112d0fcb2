"""Progress lines while a stage runs, and that they change nothing (beam_pipeline/progress.py)."""
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

from beam_pipeline.build import CorpusBuild
from beam_pipeline.config import load_config
from beam_pipeline.progress import CountingFnApiRunner, StageProgress, is_local_direct
from conftest import IN_PROCESS, SAMPLE_CONFIG

LINE = re.compile(r"^\[(?P<stage>\w+)\] (?:(?P<n>[\d,]+) records so far|running)"
                  r"(?: \((?P<done>\d+) of (?P<steps>\d+) fused steps done\))?, (?P<t>[\d.]+)s$")


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


def test_progress_polls_a_running_results_metrics():
    options = PipelineOptions(["--runner=DataflowRunner", "--progress_interval=0.05"])
    lines = []
    progress = StageProgress("ingest", options, lines.append)
    assert progress.runner() is None, "non-local runners are not replaced"
    result = _RunningResult()
    with progress:
        progress.watch(result)
        time.sleep(0.2)
        result.value = 12345
        time.sleep(0.3)
    assert lines and all(LINE.match(line) for line in lines), lines
    assert lines[0].startswith("[ingest] running, ")  # the runner could not answer yet
    assert "[ingest] 12,345 records so far, " in lines[-1]


class _PortableResult(PortableResult):
    """A portable job's result: its metrics() caches the first answer, so it must not be polled."""

    def __init__(self):
        self.calls = 0

    def metrics(self):
        self.calls += 1
        raise AssertionError("progress polled a portable result's metrics")


def test_progress_never_polls_a_portable_result():
    lines = []
    progress = StageProgress("ingest", PipelineOptions(["--runner=FlinkRunner", "--progress_interval=0.05"]),
                             lines.append)
    result = _PortableResult()
    with progress:
        progress.watch(result)
        time.sleep(0.3)
    assert result.calls == 0 and lines and all(line.startswith("[ingest] running, ") for line in lines)


def test_progress_off_prints_nothing_and_keeps_the_direct_runner():
    lines = []
    progress = StageProgress("ingest", PipelineOptions([*IN_PROCESS, "--progress_interval=0"]), lines.append)
    assert progress.runner() is None
    with progress:
        time.sleep(0.1)
    assert lines == []
    assert is_local_direct(PipelineOptions([])) and not is_local_direct(PipelineOptions(["--runner=FlinkRunner"]))


#: In-flight counts need workers that run beside the runner (gRPC); ``in_memory`` runs each bundle inside
#: the runner's call, so there counts arrive per finished fused step only.
THREADED = ["--runner=DirectRunner", "--direct_running_mode=multi_threading", "--direct_num_workers=1"]


def test_local_runner_counts_finished_and_running_bundles():
    lines = []
    progress = StageProgress("demo", PipelineOptions([*THREADED, "--progress_interval=0.1"]), lines.append)
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
    assert progress.records_so_far() == 60
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
    result = CorpusBuild(config, PipelineOptions([*local_default, "--progress_interval=0.3"]),
                         snapshot_id=built["manifest"]["snapshot_id"], log=lines.append).run()

    assert result.dataset_id == built["manifest"]["dataset_id"]
    after = json.load(open(ledger))
    assert after["shards"] == before["shards"] and after["counts"] == before["counts"]
    progress = [m for m in map(LINE.match, lines) if m and m.group("stage") == "tokenize"]
    assert progress, lines
    assert any(m.group("n") for m in progress), f"no record count in {[m.group(0) for m in progress]}"
    assert int(progress[-1].group("n").replace(",", "")) <= before["counts"]["in"]
    assert lines.index(progress[0].group(0)) > lines.index(next(l for l in lines if l.startswith("[tokenize] running ->")))
