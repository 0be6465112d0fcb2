"""Progress lines while a stage's job runs: ``[ingest] 12,345 records so far, 42.1s``.

The driver prints a line when a stage starts and when it is done; in between,
:class:`StageProgress` prints one every ``--progress_interval`` seconds (0
turns them off) with the records that have entered the stage so far (the
stage's ``in`` counter, ``accounting.py``) and the time spent in the stage.
Where the count comes from depends on the runner:

* Dataflow, whose ``run()`` returns while the job runs: the running
  ``DataflowPipelineResult``'s ``metrics()`` are polled (attempted values;
  Dataflow caches them only once the job is terminal);
* the portable runners (Flink, Spark, a job service): no count, the line
  says ``running``. Their ``PipelineResult.metrics()`` keeps the *first*
  answer forever, so polling a running job would leave the driver with the
  empty metrics of a job that had just started, and the stage's accounting
  with zeros. Only results known to answer live are polled;
* the local DirectRunner, whose ``run()`` blocks until the job is done and
  whose metrics exist only afterwards: the stage runs on
  :class:`CountingFnApiRunner`, the DirectRunner's own FnApiRunner (same
  engine, same options, same results) that adds up the user counters of
  every bundle as it finishes, and asks the SDK workers for the counters of
  the bundles in flight every interval (the Fn API's progress requests):
  ``[near_dedup] 768 records so far (9 of 14 fused steps done), 12.0s``.
  In-flight counts need workers beside the runner (``multi_processing``, the
  default, or ``multi_threading``); ``in_memory`` runs a bundle inside the
  runner's own call, so there the count grows per finished fused step.

Progress only observes: no transform is added and nothing it sees reaches a
layer or a dataset (``tests/test_dataflow_dry_run.py`` builds the sample with
progress lines on and compares the dataset id).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner

from beam_pipeline.accounting import IN
from beam_pipeline.options.progress_options import ProgressOptions


class CountingFnApiRunner(fn_runner.FnApiRunner):
    """The DirectRunner's FnApiRunner, reporting each finished bundle's user counters.

    Provisioned like ``DirectRunner.run_pipeline`` does it (the SDK workers
    get the pipeline options), minus the attempt to download and start the
    Prism runner first: locally the build always runs on the FnApiRunner,
    which is what ``docs/decisions.md`` prescribes (no network).
    """

    def __init__(self, on_bundle: Callable[[str, dict], None], on_plan: Callable[[int], None],
                 progress_request_frequency: float | None = None):
        super().__init__(progress_request_frequency=progress_request_frequency)
        self._on_bundle = on_bundle
        self._on_plan = on_plan

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        self._provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return super().run_pipeline(pipeline, options)

    def run_stages(self, stage_context, stages):
        self._on_plan(len(stages))
        return super().run_stages(stage_context, stages)

    def _execute_bundle(self, runner_execution_context, bundle_context_manager, bundle_input):
        result = super()._execute_bundle(runner_execution_context, bundle_context_manager, bundle_input)
        try:
            self._on_bundle(bundle_context_manager.stage.name,
                            user_counters(result.process_bundle.monitoring_infos))
        except Exception:  # noqa: BLE001 - progress must never fail a job
            pass
        return result


def user_counters(infos) -> dict[tuple[str, str], int]:
    """{(namespace, name): value} of the user sum counters among monitoring infos."""
    counters: dict[tuple[str, str], int] = {}
    for info in infos:
        if info.urn != monitoring_infos.USER_COUNTER_URN:
            continue
        key = (info.labels[monitoring_infos.NAMESPACE_LABEL], info.labels[monitoring_infos.NAME_LABEL])
        counters[key] = counters.get(key, 0) + monitoring_infos.extract_counter_value(info)
    return counters


def in_flight_counters() -> dict[tuple[str, str], int]:
    """User counters of the bundles running now, from the FnApiRunner's latest progress responses.

    Each running bundle has a ``ProgressRequester`` thread holding the latest
    ``ProcessBundleProgressResponse``; a finished bundle's requester is marked
    done (its counters then arrive through ``_execute_bundle``).
    """
    counters: dict[tuple[str, str], int] = {}
    for thread in threading.enumerate():
        if not isinstance(thread, fn_runner.ProgressRequester) or getattr(thread, "_done", True):
            continue
        latest = getattr(thread, "_latest_progress", None)
        if latest is None:
            continue
        for key, value in user_counters(latest.monitoring_infos).items():
            counters[key] = counters.get(key, 0) + value
    return counters


def polls_live_metrics(result) -> bool:
    """Whether ``result.metrics()`` may be called while the job runs without side effects."""
    try:
        from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult
    except ImportError:  # no apache_beam[gcp]
        return False
    return isinstance(result, DataflowPipelineResult)


def is_local_direct(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    return (name in (None, "DirectRunner", "SwitchingDirectRunner")
            and not options.view_as(StandardOptions).streaming)


class StageProgress:
    """Prints ``[stage] N records so far, T s`` every interval while a stage's job runs.

    Use::

        progress = StageProgress(stage, options, log)
        pipeline = beam.Pipeline(runner=progress.runner(), options=options)
        ...
        with progress:
            result = pipeline.run()
            progress.watch(result)
            result.wait_until_finish()
    """

    def __init__(self, stage: str, options: PipelineOptions, log: Callable[[str], None]):
        self.stage = stage
        self.options = options
        self.log = log
        self.interval = float(options.view_as(ProgressOptions).progress_interval or 0)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._local_in: int | None = None
        self._steps_done: set[str] = set()
        self._steps: int | None = None
        self._result = None
        self._shown = 0  # counts shown never go down (a finished part of a step leaves the in-flight sum early)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    # --- wiring -------------------------------------------------------------

    def runner(self):
        """The runner for the stage's pipeline; None keeps the one the options name."""
        if self.interval <= 0 or not is_local_direct(self.options):
            return None
        return CountingFnApiRunner(self._bundle_done, self._plan, progress_request_frequency=self.interval)

    def watch(self, result) -> None:
        """Poll this (running) result's metrics from now on."""
        self._result = result

    def __enter__(self):
        self._started = time.monotonic()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name=f"progress-{self.stage}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return False

    # --- counting -----------------------------------------------------------

    def _plan(self, steps: int) -> None:
        with self._lock:
            self._steps = steps

    def _bundle_done(self, step: str, counters: dict) -> None:
        with self._lock:
            self._steps_done.add(step)
            entered = counters.get((self.stage, IN))
            if entered is not None:
                self._local_in = (self._local_in or 0) + entered

    def records_so_far(self) -> int | None:
        result = self._result
        if result is not None and not isinstance(result, fn_runner.RunnerResult):
            if not polls_live_metrics(result):
                return None
            try:
                found = result.metrics().query(MetricsFilter().with_namespace(self.stage).with_name(IN))
                values = [r.attempted if r.attempted is not None else r.committed for r in found["counters"]]
                values = [v for v in values if v is not None]
                if values:
                    return int(sum(values))
            except Exception:  # noqa: BLE001 - a runner that cannot answer yet: no count this time
                return None
            return None
        try:
            running = in_flight_counters().get((self.stage, IN))
        except Exception:  # noqa: BLE001
            running = None
        with self._lock:
            if self._local_in is None and running is None:
                return None
            self._shown = max(self._shown, (self._local_in or 0) + (running or 0))
            return self._shown

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        records = self.records_so_far()
        with self._lock:
            steps = (f" ({len(self._steps_done)} of {self._steps} fused steps done)"
                     if self._steps and self._result is None else "")
        if records is None:
            return f"[{self.stage}] running{steps}, {elapsed:.1f}s"
        return f"[{self.stage}] {records:,} records so far{steps}, {elapsed:.1f}s"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            text = self.line()
            self.lines.append(text)
            try:
                self.log(text)
            except Exception:  # noqa: BLE001 - a closed stream must not kill the stage
                pass
