"""Per-stage execution seconds in the run's metrics.json (beam_pipeline/build/stage_seconds.py): what the runner's
workers report per transform, summed by stage."""
import json
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build.stage_seconds import process_cpu_seconds, record, stage_seconds


def _busy(x, seconds=0.6):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return x


def test_a_busy_stage_gets_its_seconds_and_the_idle_one_about_none(tmp_path):
    pipeline = beam.Pipeline(options=PipelineOptions(["--direct_running_mode=in_memory"]))
    _ = (
        pipeline
        | "Start" >> beam.Create([1, 2], reshuffle=False)
        | "Heavy" >> beam.Map(_busy)
        | "Light" >> beam.Map(lambda x: x)
    )
    before = process_cpu_seconds()
    result = pipeline.run()
    result.wait_until_finish()
    job_cpu = process_cpu_seconds() - before
    seconds = stage_seconds(result, {"Heavy": "heavy", "Light": "light"})
    assert set(seconds) <= {"heavy", "light", "other"} and "heavy" in seconds
    assert seconds["heavy"] >= 1.0  # 2 x 0.6 s of CPU: at least that much time in the stage (more on a busy machine)
    assert seconds.get("light", 0) < seconds["heavy"] / 4

    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"run_id": "r", "timing_seconds": {"total": 1.0}}))
    record(str(path), seconds, job_cpu)
    written = json.loads(path.read_text())
    assert written["execution_seconds"]["heavy"] == seconds["heavy"]
    assert written["execution_seconds"]["total"] == round(sum(seconds.values()), 3)
    assert written["cpu_seconds"]["total"] == round(job_cpu, 3)
    assert 1.1 <= written["cpu_seconds"]["heavy"] <= job_cpu + 0.01  # its share of the job's real CPU seconds
    assert written["timing_seconds"] == {"total": 1.0}  # the rest is kept


def test_a_runner_without_monitoring_metrics_writes_nothing(tmp_path):
    class NoMetrics:
        def monitoring_metrics(self):
            raise NotImplementedError

    assert stage_seconds(NoMetrics(), {}) == {}
    path = tmp_path / "metrics.json"
    path.write_text("{}")
    record(str(path), {})
    assert json.loads(path.read_text()) == {}
