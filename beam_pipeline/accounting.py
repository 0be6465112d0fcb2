"""Per-stage accounting: every record is passed, filtered with a reason, or dead-lettered.

The one place where metric names are made. Each stage counts in the Beam
metrics namespace named after the stage::

    in                  records that entered the stage
    passed              records the stage handed on (or annotated)
    filtered:<reason>   records dropped, by reason
    dead_letter         records the stage could not process

and the same names per source in the namespace ``<stage>.source.<name>``.
After a stage's job finishes, :func:`counts_from_result` reads the committed
counters and :func:`check_stage` enforces ``in == passed + filtered +
dead_letter`` (and the dead-letter threshold) before the layer is committed.
The names follow the counters of the C4 pipeline in tensorflow/datasets.
"""
from __future__ import annotations

from typing import Any

from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

IN, PASSED, DEAD_LETTER = "in", "passed", "dead_letter"
FILTERED_PREFIX = "filtered:"
SOURCE_NAMESPACE = "{stage}.source.{source}"


class AccountingError(RuntimeError):
    """A stage lost records, or dead-lettered more than the configured share."""


#: In the message of an error a DoFn raises when a join finds one side missing that a
#: committed, balanced layer must hold: the runner lost records on the way (the driver
#: then treats the job like an unbalanced one: rerun).
LOST_IN_JOIN = "records were lost on the way"


class RecordsLost(AccountingError):
    """The counts of a stage do not balance, or its outputs do not hold the rows it counted.

    The data cannot cause this (every record is counted once on every path):
    a runner lost or repeated records, so rerunning the stage's job is the remedy.
    """


class StageCounters:
    """Counters of one stage, totals and per source; create in ``DoFn.setup``."""

    def __init__(self, stage: str):
        self.stage = stage
        self._cache: dict[tuple[str, str], Any] = {}

    def _counter(self, namespace: str, name: str):
        key = (namespace, name)
        counter = self._cache.get(key)
        if counter is None:
            counter = self._cache[key] = Metrics.counter(namespace, name)
        return counter

    def inc(self, name: str, source: str | None = None, n: int = 1) -> None:
        self._counter(self.stage, name).inc(n)
        if source is not None:
            self._counter(SOURCE_NAMESPACE.format(stage=self.stage, source=source), name).inc(n)

    def entered(self, source: str | None = None, n: int = 1) -> None:
        self.inc(IN, source, n)

    def passed(self, source: str | None = None, n: int = 1) -> None:
        self.inc(PASSED, source, n)

    def filtered(self, reason: str, source: str | None = None, n: int = 1) -> None:
        self.inc(FILTERED_PREFIX + reason, source, n)

    def dead_letter(self, source: str | None = None, n: int = 1) -> None:
        self.inc(DEAD_LETTER, source, n)


def _empty() -> dict:
    return {IN: 0, PASSED: 0, "filtered": {}, DEAD_LETTER: 0}


def _add(counts: dict, name: str, value: int) -> None:
    if name.startswith(FILTERED_PREFIX):
        reason = name[len(FILTERED_PREFIX):]
        counts["filtered"][reason] = counts["filtered"].get(reason, 0) + value
    elif name in (IN, PASSED, DEAD_LETTER):
        counts[name] += value
    else:
        counts.setdefault("other", {})[name] = counts.setdefault("other", {}).get(name, 0) + value


def counts_from_result(result, stage: str) -> dict:
    """Committed counters of ``stage`` from a finished pipeline result."""
    counts = _empty()
    counts["by_source"] = {}
    prefix = SOURCE_NAMESPACE.format(stage=stage, source="")
    for counter in result.metrics().query(MetricsFilter())["counters"]:
        namespace, name = counter.key.metric.namespace, counter.key.metric.name
        value = counter.committed if counter.committed is not None else counter.attempted
        if namespace == stage:
            _add(counts, name, value)
        elif namespace.startswith(prefix):
            source = namespace[len(prefix):]
            _add(counts["by_source"].setdefault(source, _empty()), name, value)
    return _sorted(counts)


def _sorted(counts: dict) -> dict:
    counts["filtered"] = dict(sorted(counts["filtered"].items()))
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
                f"filtered={dropped(c)} + dead_letter={c[DEAD_LETTER]} = {accounted}; "
                f"records were lost or counted twice")
    if counts[IN] and counts[DEAD_LETTER] / counts[IN] > max_dead_letter_fraction:
        raise AccountingError(
            f"stage {stage}: {counts[DEAD_LETTER]} of {counts[IN]} records "
            f"({counts[DEAD_LETTER] / counts[IN]:.2%}) went to the dead letter, above "
            f"accounting.max_dead_letter_fraction={max_dead_letter_fraction:.2%}; "
            f"see the dead_letter layer of this stage for the records and their errors")


def check_outputs(stage: str, counts: dict, rows: dict[str, int], expected: dict[str, str]) -> None:
    """Raise :class:`RecordsLost` unless each output holds as many rows as the counter it mirrors.

    ``expected`` maps an output to a count (``passed``, ``in``, ``dead_letter``):
    the counters are taken where a record is decided, the rows where it is
    written, so this catches records lost between the two.
    """
    for output, count in sorted(expected.items()):
        if output in rows and rows[output] != counts[count]:
            raise RecordsLost(f"stage {stage}: {count}={counts[count]} but its {output} output holds "
                              f"{rows[output]} rows; records were lost or written twice")
