"""Per-stage accounting: every record is passed, filtered with a reason, or dead-lettered.

The one place where count names are made. A stage counts::

    in                  records that entered the stage
    passed              records the stage handed on (or annotated)
    filtered:<reason>   records dropped, by reason
    dead_letter         records the stage could not process

in total and per source (the names of the C4 pipeline in tensorflow/datasets).

Counts are **data of the job**, not runner metrics: a DoFn that decides records
keeps a :class:`Tally` and emits it on the ``counts`` output (per element for a
task that handles a whole file or partition, per bundle otherwise: see
:class:`CountingDoFn`). A runner discards the outputs of a failed bundle
attempt, so a retried bundle is counted once, on every runner, where metrics
are "attempted" on some and "committed" on others. Each stage's counts are
summed by :class:`SumCounts` and checked by the step that commits its layer
(:class:`beam_pipeline.transforms.layer_io.CommitLayer`): ``in == passed +
filtered + dead_letter`` in total and per source (:func:`check_stage`), and
each output holds as many rows as the count it mirrors (:func:`check_outputs`).

A :class:`Tally` also increments Beam metrics of the same names (namespace =
stage, and ``<stage>.source.<name>`` per source): the progress display reads
them while the job runs; nothing that is written reads them.
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

IN, PASSED, DEAD_LETTER = "in", "passed", "dead_letter"
FILTERED_PREFIX = "filtered:"
SOURCE_NAMESPACE = "{stage}.source.{source}"

#: The tagged output on which counting DoFns emit their tallies.
COUNTS = "counts"

#: A count as data: (stage, name, source or "") -> n.
CountKey = tuple[str, str, str]


class AccountingError(RuntimeError):
    """A stage lost records, or dead-lettered more than the configured share."""


#: In the message of an error raised when a join finds one side missing that a
#: committed, balanced layer must hold, or when a stage's counts do not balance:
#: the runner lost or repeated records on the way. The driver then runs the job
#: again (the layers committed so far are reused).
LOST_IN_JOIN = "records were lost on the way"
RECORDS_LOST = "records were lost or counted twice"


class RecordsLost(AccountingError):
    """The counts of a stage do not balance, or its outputs do not hold the rows it counted.

    The data cannot cause this (every record is counted once on every path):
    a runner lost or repeated records, so running the job again is the remedy.
    """


#: Increments a :class:`Tally` adds up before it passes them to the runner's counters, which only the
#: live progress reads; :meth:`Tally.take` passes the rest. A counter update per increment cost more than
#: the count itself (~1 s of CPU in near dedup's 200 MB side-by-side run: 400k increments).
REPORT_EVERY = 1024


class Tally:
    """Counts of one stage, in total and per source, kept by a DoFn and emitted as data.

    Create it in ``DoFn.setup`` (or per bundle); :meth:`take` returns what was
    counted since the last call and starts again.
    """

    def __init__(self, stage: str):
        self.stage = stage
        self._counts: collections.Counter = collections.Counter()
        self._metrics: dict[tuple[str, str], Any] = {}
        self._unreported: collections.Counter = collections.Counter()
        self._held = 0

    def inc(self, name: str, source: str | None = None, n: int = 1) -> None:
        if not n:
            return
        self._counts[(self.stage, name, source or "")] += n
        self._unreported[(name, source)] += n
        self._held += 1
        if self._held >= REPORT_EVERY:
            self._report()

    def entered(self, source: str | None = None, n: int = 1) -> None:
        self.inc(IN, source, n)

    def passed(self, source: str | None = None, n: int = 1) -> None:
        self.inc(PASSED, source, n)

    def filtered(self, reason: str, source: str | None = None, n: int = 1) -> None:
        self.inc(FILTERED_PREFIX + reason, source, n)

    def dead_letter(self, source: str | None = None, n: int = 1) -> None:
        self.inc(DEAD_LETTER, source, n)

    def take(self) -> dict[CountKey, int]:
        """The counts since the last call (and forget them); the runner's counters get them too."""
        self._report()
        counts, self._counts = dict(self._counts), collections.Counter()
        return counts

    def discard(self) -> None:
        """Forget the counts since the last call, unreported: what an attempt that failed counted."""
        self._counts.clear()
        self._unreported.clear()
        self._held = 0

    def _report(self) -> None:
        """Add the increments held to the runner's counters (live progress only: counts travel as data)."""
        for (name, source), n in self._unreported.items():
            self._metric(self.stage, name).inc(n)
            if source is not None:
                self._metric(SOURCE_NAMESPACE.format(stage=self.stage, source=source), name).inc(n)
        self._unreported.clear()
        self._held = 0

    def tagged(self) -> Iterator[beam.pvalue.TaggedOutput]:
        """The counts since the last call as a ``counts`` output (nothing if there are none)."""
        counts = self.take()
        if counts:
            yield beam.pvalue.TaggedOutput(COUNTS, counts)

    def tagged_at_bundle_end(self) -> Iterator[beam.pvalue.TaggedOutput]:
        """:meth:`tagged` for ``finish_bundle``, whose outputs carry their window themselves."""
        counts = self.take()
        if counts:
            yield beam.pvalue.TaggedOutput(COUNTS, WindowedValue(counts, MIN_TIMESTAMP, (GlobalWindow(),)))

    def _metric(self, namespace: str, name: str):
        key = (namespace, name)
        metric = self._metrics.get(key)
        if metric is None:
            metric = self._metrics[key] = Metrics.counter(namespace, name)
        return metric


class CountingDoFn(beam.DoFn):
    """A DoFn that counts into ``self.tally`` (stage ``STAGE``) and emits the tally per bundle.

    Subclasses set ``stage`` (or pass it), count in ``process`` and declare the
    ``counts`` output (``.with_outputs(COUNTS, ...)``). Use it for DoFns that see
    many small elements; a task that handles a whole file or partition yields
    ``self.tally.tagged()`` at the end of its element instead.
    """

    def __init__(self, stage: str):
        super().__init__()
        self.stage = stage

    def setup(self):
        self.tally = Tally(self.stage)

    def finish_bundle(self):
        yield from self.tally.tagged_at_bundle_end()


class SumCounts(beam.CombineFn):
    """Count dicts -> their sum (an empty dict for no input)."""

    def create_accumulator(self):
        return collections.Counter()

    def add_input(self, accumulator, counts):
        accumulator.update(counts)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = collections.Counter()
        for accumulator in accumulators:
            merged.update(accumulator)
        return merged

    def extract_output(self, accumulator):
        return dict(accumulator)


def _empty() -> dict:
    return {IN: 0, PASSED: 0, "filtered": {}, DEAD_LETTER: 0}


def _add(counts: dict, name: str, value: int) -> None:
    if name.startswith(FILTERED_PREFIX):
        reason = name[len(FILTERED_PREFIX) :]
        counts["filtered"][reason] = counts["filtered"].get(reason, 0) + value
    elif name in (IN, PASSED, DEAD_LETTER):
        counts[name] += value
    else:
        counts.setdefault("other", {})[name] = counts.setdefault("other", {}).get(name, 0) + value


def stage_counts(stage: str, summed: dict[CountKey, int]) -> dict:
    """The counts of ``stage`` (total, ``filtered`` by reason, ``other``, ``by_source``) from summed tallies."""
    counts = _empty()
    counts["by_source"] = {}
    for (name_stage, name, source), value in sorted(summed.items()):
        if name_stage != stage:
            continue
        _add(counts, name, value)
        if source:
            _add(counts["by_source"].setdefault(source, _empty()), name, value)
    return _sorted(counts)


def counts_from_result(result, stage: str) -> dict:
    """The counts of ``stage`` from a finished pipeline's Beam metrics (tests and tooling only: the
    build takes its counts from the data, :func:`stage_counts`)."""
    counts = _empty()
    counts["by_source"] = {}
    prefix = SOURCE_NAMESPACE.format(stage=stage, source="")
    for counter in result.metrics().query(MetricsFilter())["counters"]:
        namespace, name = counter.key.metric.namespace, counter.key.metric.name
        value = counter.committed if counter.committed is not None else counter.attempted
        if namespace == stage:
            _add(counts, name, value)
        elif namespace.startswith(prefix):
            _add(counts["by_source"].setdefault(namespace[len(prefix) :], _empty()), name, value)
    return _sorted(counts)


def _sorted(counts: dict) -> dict:
    counts["filtered"] = dict(sorted(counts["filtered"].items()))
    if "other" in counts:
        counts["other"] = dict(sorted(counts["other"].items()))
    if "by_source" in counts:
        counts["by_source"] = {s: _sorted(c) for s, c in sorted(counts["by_source"].items())}
    return counts


def dropped(counts: dict) -> int:
    return sum(counts["filtered"].values())


def check_stage(stage: str, counts: dict, max_dead_letter_fraction: float) -> None:
    """Raise :class:`AccountingError` unless the stage accounts for every record."""
    groups = [("all sources", counts)] + [(f"source {s}", c) for s, c in counts.get("by_source", {}).items()]
    for label, c in groups:
        accounted = c[PASSED] + dropped(c) + c[DEAD_LETTER]
        if c[IN] != accounted:
            raise RecordsLost(
                f"stage {stage} ({label}): in={c[IN]} but passed={c[PASSED]} + "
                f"filtered={dropped(c)} + dead_letter={c[DEAD_LETTER]} = {accounted}; {RECORDS_LOST}"
            )
    if counts[IN] and counts[DEAD_LETTER] / counts[IN] > max_dead_letter_fraction:
        raise AccountingError(
            f"stage {stage}: {counts[DEAD_LETTER]} of {counts[IN]} records "
            f"({counts[DEAD_LETTER] / counts[IN]:.2%}) went to the dead letter, above "
            f"accounting.max_dead_letter_fraction={max_dead_letter_fraction:.2%}; "
            f"fix or remove those records (each is listed with its file, record and error by "
            f"`python -m beam_pipeline dead-letter <output_root> --stage {stage}`), or raise "
            f"accounting.max_dead_letter_fraction in the config if they are expected, and run the same command again"
        )


def check_outputs(stage: str, counts: dict, rows: dict[str, int], expected: dict[str, str]) -> None:
    """Raise :class:`RecordsLost` unless each output holds as many rows as the count it mirrors.

    ``expected`` maps an output to a count (``passed``, ``in``, ``dead_letter``):
    the counts are taken where a record is decided, the rows where it is
    written, so this catches records lost between the two.
    """
    for output, count in sorted(expected.items()):
        if output in rows and rows[output] != counts[count]:
            raise RecordsLost(
                f"stage {stage}: {count}={counts[count]} but its {output} output holds "
                f"{rows[output]} rows; {RECORDS_LOST}"
            )
