"""Bounded output per bundle: a splittable DoFn that hands the rest of its work back to the runner
once its bundle has emitted a budget of bytes.

Where the pipeline turns a small element into many rows (a snapshot file into its documents, a
layer partition into its rows, a web-archive range into its captures), one bundle's output is
bounded by the bundle, not by the element: on Flink, in batch, a bundle is a task's whole input.

Why a bound is needed: Beam 2.62's Flink runner (the job server this project runs, docs/flink.md)
processes a batch task's whole input as one bundle (``FlinkExecutableStageFunction.mapPartition``)
and only drains the bundle's outputs after the SDK reports the bundle done
(``SdkHarnessClient.ActiveBundle.close``: ``MoreFutures.get(response)`` before
``BeamFnDataInboundObserver.awaitCompletion``). Its inbound queue holds 100 data messages (the
Python SDK flushes one every 10 MB), so a task whose output passes ~1 GB waits for the SDK to
finish while the SDK waits for room to send: a deadlock with every process idle
(bench/results/scale-flink-20261207-scale-xl.md). Below that, the TaskManager's heap holds the
whole output until the bundle ends, so its memory grows with the corpus per task.

The fix is Beam's own mechanism for this, a splittable DoFn's self-checkpoint
(``RestrictionTracker.defer_remainder``, `the SDF programming guide
<https://beam.apache.org/documentation/programming-guide/#splittable-dofns>`_): once the bundle
has emitted its budget (``--bundle_output_mb``), each element hands its unclaimed remainder back as a residual. The
bundle ends, the runner drains its outputs and processes the residuals in a new bundle (Flink's
batch runner in the same task: its SDF loop; the local runner and Dataflow reschedule them). What
each element yields, and so every layer, is the same for any budget; only the bundles differ.

The restriction is an ``OffsetRange`` over the ordinals of what :meth:`BudgetedExpandFn.items`
yields for the element. A subclass that can resume inside an element (``resumable``) gets the
ordinal to start from; one that cannot is deferred only whole, before it starts (its element's
output is bounded by configuration: a layer partition, a web-archive range).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Iterator, NamedTuple

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.transforms.core import RestrictionProvider

#: The open end of a resumable element's ordinals: how many items it yields is known only at its end.
_OPEN_END = sys.maxsize
_END = object()

#: The default budget. Flink's runner holds at most ~1 GB of one bundle's output (100 messages of
#: ~10 MB); 64 MB keeps one task's held output far below that and below a small TaskManager's heap,
#: and costs a bundle round trip per 64 MB (a few milliseconds: docs/flink.md).
DEFAULT_BUNDLE_OUTPUT_MB = 64


class BundleOptions(PipelineOptions):
    """How much one bundle of an expanding step may emit before it hands the rest to a later bundle."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--bundle_output_mb",
            default=None,  # DEFAULT_BUNDLE_OUTPUT_MB; None so that workers, which never read it, are not sent it
            type=float,
            help="MiB of rows one bundle of a reading step (snapshot files, layer partitions, web-archive "
            "ranges) emits before it defers the rest to a new bundle (a splittable DoFn's self-checkpoint). "
            "Bounds what a Flink TaskManager holds per task; never changes what a build writes "
            f"(default {DEFAULT_BUNDLE_OUTPUT_MB}; docs/flink.md, 'Bounded output per bundle').",
        )


class BundleBudget(NamedTuple):
    """What a :class:`BudgetedExpandFn` is given at construction: its bytes per bundle, and the label of
    the transform it is part of (its stage's label first: ``Ingest/...``) for its errors."""

    bytes: int
    step: str = ""


def bundle_budget(pipeline) -> BundleBudget:
    """The pipeline's ``--bundle_output_mb`` in bytes, or no budget where the runner would lose deferred
    work, and the label of the transform being expanded.

    Beam's local runner (the FnApiRunner behind the DirectRunner, apache_beam 2.77) drops an SDF's
    deferred residuals when it runs more than one SDK worker (``--direct_num_workers`` other than 1,
    the local builds' default): measured, 200 of 807 outputs of a three-element probe came out.
    It holds every stage's data in its own memory anyway, so a budget would bound nothing there.

    The label: a :class:`BudgetedExpandFn`'s errors carry it the way Beam's own DoFns' errors carry
    their step (``[while running '<step>']``, which names the failed stage to the driver,
    ``stage_failure.failed_stage``); Beam (2.77) does not add it to a splittable DoFn's errors
    (``DoFnRunner.process_with_sized_restriction``).
    """
    megabytes = pipeline.options.view_as(BundleOptions).bundle_output_mb
    if megabytes is None:
        megabytes = DEFAULT_BUNDLE_OUTPUT_MB
    if not megabytes > 0:
        raise ValueError(f"--bundle_output_mb must be > 0, not {megabytes}")
    step = pipeline._current_transform().full_label  # noqa: SLF001 - no public way to ask during expand
    if _local_runner_with_workers(pipeline):
        return BundleBudget(UNBOUNDED, step)
    return BundleBudget(max(1, int(megabytes * (1 << 20))), step)


#: No budget: a bundle takes all its elements whole.
UNBOUNDED = sys.maxsize


def _local_runner_with_workers(pipeline) -> bool:
    names = {cls.__name__ for cls in type(pipeline.runner).__mro__}
    if not names & {"DirectRunner", "SwitchingDirectRunner", "FnApiRunner"}:
        return False
    return pipeline.options.view_as(DirectOptions).direct_num_workers != 1


def output_bytes(item: Any) -> int:
    """A cheap estimate of an output's encoded size: its strings and bytes, plus a little per value."""
    if isinstance(item, beam.pvalue.TaggedOutput):
        item = item.value
    if isinstance(item, (str, bytes)):
        return len(item)
    if isinstance(item, dict):
        return sum(output_bytes(value) for value in item.values()) + 8 * len(item)
    if isinstance(item, (tuple, list)):
        if len(item) > 2 and isinstance(item[0], (int, float)) and isinstance(item[-1], (int, float)):
            return 8 * len(item)  # a vector of numbers (a MinHash signature): not walked
        return sum(output_bytes(value) for value in item) + 8
    nbytes = getattr(item, "nbytes", None)  # a numpy array
    return int(nbytes) if isinstance(nbytes, int) else 8


class _Ordinals(RestrictionProvider):
    """The restriction of an element: the ordinals of its items not yet emitted."""

    def __init__(self, resumable: bool):
        self._resumable = resumable

    def initial_restriction(self, element) -> OffsetRange:
        return OffsetRange(0, _OPEN_END if self._resumable else 1)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction: OffsetRange) -> int:
        return 1  # unknown until read; every element weighs the same to a runner's splitting

    def split(self, element, restriction: OffsetRange) -> Iterator[OffsetRange]:
        yield restriction  # no initial splitting: an element starts whole


#: The tracker parameter of a :class:`BudgetedExpandFn` whose elements are deferred only whole; a subclass
#: that overrides ``process`` (to take side inputs) declares its tracker with it.
WHOLE_ELEMENTS = beam.DoFn.RestrictionParam(_Ordinals(False))
#: The tracker parameter of a :class:`ResumableExpandFn`.
RESUMABLE_ELEMENTS = beam.DoFn.RestrictionParam(_Ordinals(True))


class BudgetedExpandFn(beam.DoFn):
    """A DoFn whose bundle emits about its budget of bytes and defers the rest (see the module's docstring).

    ``budget``: a :class:`BundleBudget` (:func:`bundle_budget`), or bytes. A subclass gives :meth:`items` and, when it owes outputs for the work done so far (counts),
    :meth:`settle`. Each bundle emits at least one item, so every bundle makes progress.
    """

    #: whether :meth:`items` can start at any ordinal (else an element is deferred only before it starts)
    resumable = False

    def __init__(self, budget: BundleBudget | int):
        budget = budget if isinstance(budget, BundleBudget) else BundleBudget(budget)
        self._budget, self._step = budget
        self._deferred = Metrics.counter("bundle_budget", "deferred")

    def start_bundle(self):
        self._spent = 0

    def items(self, element, start: int) -> Iterable:
        """The element's outputs from ordinal ``start`` on (0 unless ``resumable``); a None is an
        ordinal with no output."""
        raise NotImplementedError

    def settle(self) -> Iterator:
        """Outputs owed for the items yielded so far (called when an element, or its part in this bundle, ends)."""
        return iter(())

    def process(self, element, tracker=WHOLE_ELEMENTS) -> Iterator:
        try:
            yield from self._process(element, tracker)
        except Exception as err:
            raise with_step(err, self._step) from None

    def _process(self, element, tracker) -> Iterator:
        start = tracker.current_restriction().start
        if not self.resumable:
            if self._spent >= self._budget:  # never the first element of a bundle: each bundle makes progress
                self._defer(tracker)
                return
            if tracker.try_claim(0):
                yield from self._emit(self.items(element, 0))
                yield from self.settle()
            return
        items = iter(self.items(element, start))
        ordinal = start
        try:
            # budget, claim, then read: an item is read (and counted by the subclass) only when it is
            # this bundle's to emit; a claimed ordinal past the last item is harmless
            while True:
                if self._spent >= self._budget:
                    self._defer(tracker)
                    break
                if not tracker.try_claim(ordinal):
                    break  # the runner split the rest off
                item = next(items, _END)
                if item is _END:
                    tracker.try_claim(_OPEN_END)  # the element is done: nothing is left to claim
                    break
                ordinal += 1
                yield from self._emit((item,))
        finally:
            close = getattr(items, "close", None)  # a generator: its open file is closed now, not at collection
            if close is not None:
                close()
        yield from self.settle()

    def _emit(self, items) -> Iterator:
        for item in items:
            if item is not None:
                self._spent += output_bytes(item)
                yield item

    def _defer(self, tracker) -> None:  # a RestrictionTrackerView, which adds defer_remainder
        self._deferred.inc()
        tracker.defer_remainder()


class ResumableExpandFn(BudgetedExpandFn):
    """A :class:`BudgetedExpandFn` that can stop inside an element and resume at an ordinal."""

    resumable = True

    def process(self, element, tracker=RESUMABLE_ELEMENTS) -> Iterator:
        yield from super().process(element, tracker)


def with_step(err: Exception, step: str) -> Exception:
    """``err`` with `` [while running '<step>']`` added to its message, as Beam's DoFnRunner adds it to
    the errors of a plain DoFn (``DoFnRunner._reraise_augmented``): the same type where it can be made
    again from its message, else a RuntimeError naming it."""
    if not step or getattr(err, "_tagged_with_step", False) or not err.args:
        return err
    annotation = f" [while running '{step}']"
    try:
        tagged = type(err)(f"{err.args[0]}{annotation}", *err.args[1:])
    except Exception:  # noqa: BLE001 - a type that cannot be made from its message
        tagged = RuntimeError(f"{type(err).__name__}: {err}{annotation}")
    tagged._tagged_with_step = True  # type: ignore[attr-defined]
    return tagged.with_traceback(err.__traceback__)
