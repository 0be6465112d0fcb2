"""What a build prints while its job runs: layer commits and records so far.

The build is one job (``beam_pipeline.build``). While it runs,
:class:`BuildProgress`

* watches the ledger of every layer the job computes and prints a line when
  one appears (the layer is committed): ``[exact_dedup] committed after 12.3s
  (in 768, passed 768, filtered 0, dead letter 0)``; ledgers are files under
  the output root, so this works on every runner;
* every ``--progress_interval`` seconds (0 turns them off), prints the records
  that have entered each uncommitted stage so far (the stage's ``in`` count):
  ``[near_dedup] 768 records so far, 12.0s``. Where the count comes from
  depends on the runner:

  * Dataflow, whose ``run()`` returns while the job runs: the running
    ``DataflowPipelineResult``'s ``metrics()`` are polled (attempted values);
  * the portable runners (Flink, Spark, a job service): no count. Their
    ``PipelineResult.metrics()`` keeps the *first* answer forever, so only
    results known to answer live are polled;
  * the local DirectRunner, whose ``run()`` blocks until the job is done: the
    job runs on :class:`CountingFnApiRunner`, the DirectRunner's own
    FnApiRunner (same engine, same options, same results) that adds up the
    user counters of every bundle as it finishes, and asks the SDK workers for
    the counters of the bundles in flight (the Fn API's progress requests).

Progress only observes: no transform is added and nothing it sees reaches a
layer or a dataset (the counts a ledger holds are data of the job:
:mod:`beam_pipeline.accounting`).
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


class BuildProgress:
    """Prints commit lines and records-so-far lines while the build's job runs.

    Use::

        progress = BuildProgress(options, log, interval)
        pipeline = beam.Pipeline(runner=progress.runner(), options=options)
        ...  # the graph
        progress.expect([(stage, layer), ...])  # the layers the job computes
        with progress:
            result = pipeline.run()
            progress.watch(result)
            result.wait_until_finish()
    """

    #: Seconds between two looks at the ledgers.
    LEDGER_POLL = 1.0

    def __init__(self, options: PipelineOptions, log: Callable[[str], None], interval: float = 30.0):
        self.options = options
        self.log = log
        self.interval = float(interval or 0)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._pending: dict[str, object] = {}  # stage -> layer, until its ledger exists
        self._local: dict[str, int] = {}  # stage -> ``in`` of the finished bundles (local runner)
        self._shown: dict[str, int] = {}  # counts shown never go down
        self._runner = None
        self._result = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    # --- wiring -------------------------------------------------------------

    def runner(self):
        """The runner for the build's pipeline; None keeps the one the options name."""
        if self._runner is None and self.interval > 0 and is_local_direct(self.options):
            self._runner = CountingFnApiRunner(self._bundle_done, lambda _steps: None,
                                               progress_request_frequency=self.interval)
        return self._runner

    def expect(self, layers: list[tuple[str, object]]) -> None:
        """The (stage, Layer) of every layer the job computes."""
        with self._lock:
            self._pending = dict(layers)

    def watch(self, result) -> None:
        """Poll this (running) result's metrics from now on."""
        self._result = result

    def __enter__(self):
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="build-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, *_):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if exc_type is None:
            self._check_ledgers()  # the last commits of the job
        return False

    # --- counting -----------------------------------------------------------

    def _bundle_done(self, _step: str, counters: dict) -> None:
        with self._lock:
            for (namespace, name), value in counters.items():
                if name == IN and namespace in self._pending:
                    self._local[namespace] = self._local.get(namespace, 0) + value

    def records_so_far(self, stage: str) -> int | None:
        result = self._result
        if result is not None and not isinstance(result, fn_runner.RunnerResult):
            if not polls_live_metrics(result):
                return None
            try:
                found = result.metrics().query(MetricsFilter().with_namespace(stage).with_name(IN))
                values = [r.attempted if r.attempted is not None else r.committed for r in found["counters"]]
                values = [v for v in values if v is not None]
                return int(sum(values)) if values else None
            except Exception:  # noqa: BLE001 - a runner that cannot answer yet: no count this time
                return None
        if self._runner is None:
            return None
        try:
            running = in_flight_counters().get((stage, IN))
        except Exception:  # noqa: BLE001
            running = None
        with self._lock:
            if stage not in self._local and running is None:
                return None
            shown = max(self._shown.get(stage, 0), self._local.get(stage, 0) + (running or 0))
            self._shown[stage] = shown
            return shown

    def _emit(self, text: str) -> None:
        self.lines.append(text)
        try:
            self.log(text)
        except Exception:  # noqa: BLE001 - a closed stream must not kill the build
            pass

    def _check_ledgers(self) -> None:
        from beam_pipeline.accounting import dropped

        with self._lock:
            pending = list(self._pending.items())
        for stage, layer in pending:
            try:
                if not layer.is_complete():
                    continue
                counts = layer.ledger()["counts"]
            except Exception:  # noqa: BLE001 - a ledger being written: look again next time
                continue
            with self._lock:
                self._pending.pop(stage, None)
            self._emit(f"[{stage}] committed after {time.monotonic() - self._started:.1f}s (in {counts['in']}, "
                       f"passed {counts['passed']}, filtered {dropped(counts)}, "
                       f"dead letter {counts['dead_letter']})")

    def _loop(self) -> None:
        next_line = time.monotonic() + self.interval
        while not self._stop.wait(self.LEDGER_POLL):
            self._check_ledgers()
            if self.interval > 0 and time.monotonic() >= next_line:
                next_line += self.interval
                elapsed = time.monotonic() - self._started
                with self._lock:
                    pending = list(self._pending)
                for stage in pending:
                    records = self.records_so_far(stage)
                    if records is not None:
                        self._emit(f"[{stage}] {records:,} records so far, {elapsed:.1f}s")
