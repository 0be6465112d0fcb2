"""What a build prints while its job runs: layer commits, records so far, dead-letter warnings.

The build is one job (``beam_pipeline.build.corpus_build``). While it runs,
:class:`BuildProgress`

* watches the ledger of every layer the job computes and prints a line when
  one appears (the layer is committed): ``[exact_dedup] committed after 12.3s
  (in 768, passed 768, filtered 0, dead letter 0; 49.5 kB written)``, and a
  ``WARNING`` line naming the dead-letter folder when the layer has dead
  letters; ledgers are files under the output root, so this works on every
  runner;
* every ``--progress_interval`` seconds (0 turns them off), prints the records
  that have entered each uncommitted stage so far (the stage's ``in`` count),
  their rate, the time elapsed and, once the layer the stage takes its records
  from is committed in this job (its ``passed`` count is the total), the
  percentage and the ETA: ``[near_dedup] 512 of 768 records so far (66%),
  42.7 records/s, 12s elapsed, ETA 6s`` (:func:`progress_line`); on a terminal
  a bar redrawn in place every second instead (:func:`progress_bar`, drawn by
  ``beam_pipeline.cli.console.Console``). Where the count comes from depends on
  the runner:

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
:mod:`beam_pipeline.records.accounting`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner

from beam_pipeline.records.accounting import IN


class CountingFnApiRunner(fn_runner.FnApiRunner):
    """The DirectRunner's FnApiRunner, reporting each finished bundle's user counters.

    Provisioned like ``DirectRunner.run_pipeline`` does it (the SDK workers
    get the pipeline options), minus the attempt to download and start the
    Prism runner first: locally the build always runs on the FnApiRunner,
    which is what ``docs/decisions.md`` prescribes (no network).
    """

    def __init__(
        self,
        on_bundle: Callable[[str, dict], None],
        on_plan: Callable[[int], None],
        progress_request_frequency: float | None = None,
    ):
        super().__init__(progress_request_frequency=progress_request_frequency)
        self._on_bundle = on_bundle
        self._on_plan = on_plan

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options_for_workers(options))
        self._provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
        return super().run_pipeline(pipeline, options)

    def run_stages(self, stage_context, stages):
        self._on_plan(len(stages))
        return super().run_stages(stage_context, stages)

    def _execute_bundle(self, runner_execution_context, bundle_context_manager, bundle_input):
        result = super()._execute_bundle(runner_execution_context, bundle_context_manager, bundle_input)
        try:
            self._on_bundle(bundle_context_manager.stage.name, user_counters(result.process_bundle.monitoring_infos))
        except Exception:  # noqa: BLE001 - progress must never fail a job
            pass
        return result


def options_for_workers(options: PipelineOptions) -> dict:
    """The pipeline options the SDK workers get, without the ones they would discard with a warning.

    An SDK worker rebuilds its options from a dictionary, a true boolean ``k``
    becoming the flag ``--k`` (``PipelineOptions.from_dictionary``). Beam's
    ``pipeline_type_check`` and ``direct_runner_use_stacked_bundle`` are set by
    flags of other names (``--no_pipeline_type_check`` ...), so ``--k`` is
    unknown to the worker, which logs "Discarding unparseable args" and uses
    the default. Those options are left out while they hold their default
    (true): the worker computes the same value, and says nothing.
    """
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    seen: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    flags = {flag for action in parser._actions for flag in action.option_strings}
    defaults = {action.dest: action.default for action in parser._actions}
    return {
        key: value
        for key, value in options.get_all_options().items()
        if not (value is True and f"--{key}" not in flags and defaults.get(key) is True)
    }


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
    return name in (None, "DirectRunner", "SwitchingDirectRunner") and not options.view_as(StandardOptions).streaming


def human_bytes(count: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as the snapshot line's byte counts)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"


def human_seconds(seconds: float) -> str:
    """75 -> '1m15s'; 3.2 -> '3s'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_line(stage: str, records: int, seconds: float, total: int | None = None) -> str:
    """``[stage] 512 of 768 records so far (67%), 42.7 records/s, 12s elapsed, ETA 6s``: the records that
    entered the stage so far, their rate over the stage's time so far, and, when the stage's total is
    known (the records its first input layer passed), the time left at that rate."""
    rate = records / seconds if seconds > 0 else 0.0
    if total:
        done = min(records, total)
        text = f"[{stage}] {done:,} of {total:,} records so far ({100 * done // total}%)"
    else:
        text = f"[{stage}] {records:,} records so far"
    text += f", {rate:,.1f} records/s, {human_seconds(seconds)} elapsed"
    if total and rate > 0 and records < total:
        text += f", ETA {human_seconds((total - records) / rate)}"
    return text


def progress_bar(stage: str, records: int, seconds: float, total: int | None = None, width: int = 24) -> str:
    """One terminal line: ``[stage] [#########.......] 512/768 42.7/s 12s ETA 6s`` (no total: no bar)."""
    rate = records / seconds if seconds > 0 else 0.0
    if total:
        done = min(records, total)
        filled = width * done // total
        text = (
            f"[{stage}] [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {rate:,.1f}/s "
            f"{human_seconds(seconds)}"
        )
        if rate > 0 and records < total:
            text += f" ETA {human_seconds((total - records) / rate)}"
        return text
    return f"[{stage}] {records:,} records {rate:,.1f}/s {human_seconds(seconds)}"


class BuildProgress:
    """Prints commit lines and progress (lines or a terminal bar) while the build's job runs.

    Use::

        progress = BuildProgress(options, log, interval)
        pipeline = beam.Pipeline(runner=progress.runner(), options=options)
        ...  # the graph
        progress.expect([(stage, layer), ...], inputs)  # the layers the job computes, their input stages
        with progress:
            result = pipeline.run()
            progress.watch(result)
            result.wait_until_finish()

    ``bar``: where a terminal shows the progress bar (``beam_pipeline.cli.console.Console``: ``show(text)``,
    ``clear()``); None prints a plain progress line every ``interval`` seconds instead (a pipe, a file,
    CI). A layer committed with dead letters adds a warning line: the records a stage could not process
    are the user's to look at (``python -m beam_pipeline dead-letter``).
    """

    #: Seconds between two looks at the ledgers (and between two refreshes of a terminal's bar).
    LEDGER_POLL = 1.0

    def __init__(self, options: PipelineOptions, log: Callable[[str], None], interval: float = 30.0, bar=None):
        self.options = options
        self.log = log
        self.interval = float(interval or 0)
        self.bar = bar if self.interval > 0 else None
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._pending: dict[str, object] = {}  # stage -> layer, until its ledger exists
        self._inputs: dict[str, list[str]] = {}  # stage -> the stages of this job whose layers it reads
        self._passed: dict[str, int] = {}  # committed stage -> its ``passed`` count
        self._committed_at: dict[str, float] = {}  # committed stage -> monotonic time of its commit
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
            # the counts of the bundles in flight are fresh at every line: a stage's bundle may run longer
            # than the interval (the fused scorers of the sample: 15 s), and its first answer comes one
            # request period after it starts
            frequency = min(self.interval, self.LEDGER_POLL)
            self._runner = CountingFnApiRunner(
                self._bundle_done, lambda _steps: None, progress_request_frequency=frequency
            )
        return self._runner

    def expect(self, layers: list[tuple[str, object]], inputs: dict[str, list[str]] | None = None) -> None:
        """The (stage, Layer) of every layer the job computes; ``inputs``: stage -> the stages whose
        layers it reads, first the one whose records it takes in (its total, once committed)."""
        with self._lock:
            self._pending = dict(layers)
            self._inputs = dict(inputs or {})

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
        if self.bar is not None:
            self.bar.clear()
        if exc_type is None:
            self._check_ledgers()  # the last commits of the job
        return False

    # --- counting -----------------------------------------------------------

    def _bundle_done(self, _step: str, counters: dict) -> None:
        with self._lock:
            for (namespace, name), value in counters.items():
                if name == IN and namespace in self._pending:
                    self._local[namespace] = self._local.get(namespace, 0) + value

    def total_of(self, stage: str) -> int | None:
        """The records the stage takes in, once its first input layer of this job is committed."""
        inputs = self._inputs.get(stage) or []
        return self._passed.get(inputs[0]) if inputs else None

    def started_at(self, stage: str) -> float:
        """When the stage's records could start coming in: the commit of its first input layer of this
        job (the one whose records it takes in), else the job's start."""
        inputs = self._inputs.get(stage) or []
        return self._committed_at.get(inputs[0], self._started) if inputs else self._started

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
            if self.bar is not None:
                self.bar.clear()
            self.log(text)
        except Exception:  # noqa: BLE001 - a closed stream must not kill the build
            pass

    def _check_ledgers(self) -> None:
        from beam_pipeline.records.accounting import dropped

        with self._lock:
            pending = list(self._pending.items())
        for stage, layer in pending:
            try:
                if not layer.is_complete():
                    continue
                ledger = layer.ledger()
                counts = ledger["counts"]
            except Exception:  # noqa: BLE001 - a ledger being written: look again next time
                continue
            now = time.monotonic()
            written = sum(
                part.get("bytes", 0)
                for output in ledger.get("outputs", {}).values()
                for part in output.get("parts", [])
            )
            with self._lock:
                self._pending.pop(stage, None)
                self._passed[stage] = counts["passed"]
                self._committed_at[stage] = now
            self._emit(
                f"[{stage}] committed after {now - self._started:.1f}s (in {counts['in']}, "
                f"passed {counts['passed']}, filtered {dropped(counts)}, "
                f"dead letter {counts['dead_letter']}" + (f"; {human_bytes(written)} written)" if written else ")")
            )
            if counts["dead_letter"]:
                self._emit(
                    f"[{stage}] WARNING: {counts['dead_letter']} records could not be processed and were "
                    f"dead-lettered under {layer.dead_letter_path}/ "
                    f"(list them: python -m beam_pipeline dead-letter {layer.root} --stage {stage})"
                )

    def _progress(self) -> list[tuple[str, int, float, int | None]]:
        """(stage, records so far, seconds, total) of every uncommitted stage with a count."""
        now = time.monotonic()
        with self._lock:
            pending = list(self._pending)
        found = []
        for stage in pending:
            records = self.records_so_far(stage)
            if records is not None:
                found.append((stage, records, now - self.started_at(stage), self.total_of(stage)))
        return found

    def _loop(self) -> None:
        next_line = time.monotonic() + self.interval
        poll = min(self.LEDGER_POLL, self.interval) if self.interval > 0 else self.LEDGER_POLL
        while not self._stop.wait(poll):
            self._check_ledgers()
            if self.interval <= 0:
                continue
            if self.bar is not None:
                running = [entry for entry in self._progress() if entry[1] > 0]
                if running:  # the earliest stage still taking records in
                    try:
                        self.bar.show(progress_bar(*running[0]))
                    except Exception:  # noqa: BLE001
                        pass
            elif time.monotonic() >= next_line:
                next_line += self.interval
                for entry in self._progress():
                    self._emit(progress_line(*entry))
