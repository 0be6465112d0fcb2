"""Where the time of a build goes: per stage, the seconds the runner's workers spent in its transforms,
and the job's CPU seconds apportioned by them.

Beam's SDK harness samples which transform a worker thread is executing (its state sampler) and
reports, per transform, ``beam:metric:ptransform_execution_time:total_msecs:v1`` (start, process and
finish of bundles). :func:`stage_seconds` sums them by the stage whose composite the transform belongs
to (the first part of its full label: ``Tokenize/...`` -> ``tokenize``; a stage's ``...Commit`` step
counts for the stage), and the driver adds them to the run's ``metrics.json`` as
``execution_seconds`` once the job is done (docs/format.md, "Run metrics"). On the local runner,
whose workers are the driver's process and its children, the job's CPU seconds (``getrusage`` of both
around the job) are also written, in total and apportioned to the stages by their execution seconds,
as ``cpu_seconds``.

What they are, and are not: execution seconds are the (wall) time a worker thread spent executing the
stage's code, summed over threads and processes: the CPU seconds of CPU-bound code on an idle machine,
more on a busy one (a thread waiting for a core is still in the stage) or when the code blocks (reading
a file); work on threads of a native library (tokenizers' or numba's thread pools) is not in them.
``cpu_seconds`` are real CPU seconds in total (every thread of every worker process, the runner's own
work between transforms included), shared out in proportion to execution seconds: a stage's share is
right when the stages wait for cores and files alike. Sampled (every ~200 ms of a thread's time), so a stage
that ran for less than that may show 0. Runners that do not return these metrics to the driver give
an empty mapping, and nothing is written.
"""

from __future__ import annotations

import json
import resource
from typing import Any

EXECUTION_MSECS = "metric:ptransform_execution_time:total_msecs:v1"


def stage_seconds(result: Any, labels: dict[str, str]) -> dict[str, float]:
    """Seconds per stage (``labels``: top-level label -> stage) from a finished job's ``result``; the
    transforms of no stage (the job's own plumbing) under ``other``; {} when the runner reports none."""
    try:
        query = result.monitoring_metrics().query()
    except Exception:  # noqa: BLE001 - a runner without monitoring metrics
        return {}
    msecs: dict[str, float] = {}
    for counter in query.get("counters", []):
        if counter.key.metric.name != EXECUTION_MSECS:
            continue
        value = counter.committed if counter.committed is not None else counter.attempted
        stage = labels.get((counter.key.step or "").split("/", 1)[0], "other")
        msecs[stage] = msecs.get(stage, 0) + (value or 0)
    return {stage: round(ms / 1000, 3) for stage, ms in sorted(msecs.items())}


def process_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def record(metrics_path: str, seconds: dict[str, float], job_cpu_seconds: float | None = None) -> None:
    """Add ``execution_seconds`` (per stage, and their total) to the run's ``metrics.json``, and with
    ``job_cpu_seconds`` the ``cpu_seconds`` (that total, shared out by execution seconds)."""
    if not seconds:
        return
    from beam_pipeline.storage.layers import read_bytes, write_json_atomic

    metrics = json.loads(read_bytes(metrics_path))
    total = sum(seconds.values())
    metrics["execution_seconds"] = {"total": round(total, 3), **seconds}
    if job_cpu_seconds is not None and total > 0:
        shares = {stage: round(job_cpu_seconds * value / total, 3) for stage, value in seconds.items()}
        metrics["cpu_seconds"] = {"total": round(job_cpu_seconds, 3), **shares}
    write_json_atomic(metrics_path, metrics)
