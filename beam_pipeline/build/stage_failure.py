"""A failed build job in the user's terms: which stage failed, and the root cause.

Runners wrap a worker's error in layers of their own (``RuntimeError:
OSError: ...``, ``[while running '<step path>']``). :func:`failed_stage`
finds the stage from the step's top-level label in the build's graph
(:func:`stage_labels`, :mod:`beam_pipeline.build.build_graph`), and
:func:`root_cause` keeps the innermost error line without what only Beam knows.
:class:`~beam_pipeline.build.corpus_build.CorpusBuild` raises
:class:`StageFailed` with both, and runs the job again when the failure is one
the data cannot cause (:func:`retryable`: the runner lost or repeated records).
"""

from __future__ import annotations

import re

from beam_pipeline.build.build_graph import BuildGraph, title
from beam_pipeline.records.accounting import LOST_IN_JOIN, RECORDS_LOST

_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|RecordsLost): ")


class StageFailed(RuntimeError):
    """The build's job failed; the message names the stage and the root cause where known.

    ``layers``: the layers of the failed stage(s) (their dead letters are kept for inspection)."""

    layers: list = []
    stage: str | None = None  # the stage (or ``a+b`` of a fused pass) whose step failed, if known


def failed_stage_name(failure: BaseException) -> str | None:
    """The stage a failure names (:attr:`StageFailed.stage`), if any."""
    return getattr(failure, "stage", None)


def root_cause(err: BaseException) -> str:
    """The innermost ``SomeError: message`` line of a (runner-wrapped) exception, in the user's terms
    (:func:`user_terms`)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if _ERROR_LINE.match(line)]
    return user_terms(causes[-1] if causes else (lines[-1] if lines else type(err).__name__))[:4000]


_BEAM_STEP = re.compile(r"\s*\[while running '[^']*'\]")
_ERROR_PREFIX = re.compile(
    r"^(?P<module>[a-z_][\w]*(?:\.[a-z_][\w]*)*\.)?(?P<name>\w*(?:Error|Exception|RecordsLost)): "
)


def user_terms(cause: str) -> str:
    """A runner's error line without what only Beam knows: no ``[while running '<step path>']``, no
    wrapping exception (``RuntimeError: OSError: ...`` -> ``OSError: ...``), no class path of the
    project's own errors (their messages are written for the user: the stage, the file, what to do),
    other classes by their name only."""
    cause = _BEAM_STEP.sub("", cause).strip()
    while True:
        match = _ERROR_PREFIX.match(cause)
        if match is None:
            return cause
        rest = cause[match.end() :]
        if _ERROR_PREFIX.match(rest) or (match.group("module") or "").startswith("beam_pipeline."):
            cause = rest
            continue
        return f"{match.group('name')}: {rest}"


def stage_labels(graph: BuildGraph) -> dict[str, str]:
    """Top-level label of a step in the job -> its stage (or stages, joined by "+")."""
    labels = {title(ref.stage): ref.stage for ref in graph.refs}
    labels.update({f"{title(ref.stage)}Commit": ref.stage for ref in graph.refs})
    labels.update({label: "+".join(stages) for label, stages in graph.groups.items()})
    labels["Publish"] = "publish"
    return labels


def failed_stage(message: str, graph: BuildGraph) -> str | None:
    """The stage whose step failed, from the runner's "while running '<step>'" (None if unknown)."""
    labels = stage_labels(graph)
    for step in re.findall(r"while running '([^']+)'", message):
        stage = labels.get(step.split("/", 1)[0])
        if stage:
            return stage
    return stage_named(message)


def retryable(message: str) -> bool:
    """A failure the data cannot cause: the runner lost or repeated records (accounting.RecordsLost)."""
    return RECORDS_LOST in message or LOST_IN_JOIN in message


def stage_named(message: str) -> str | None:
    match = re.search(r"\bstage (\w+)", message)
    return match.group(1) if match else None
