"""The landing job: one Beam pipeline that lands every source with a ``landing:`` section.

``land_sources`` builds the pipeline (one :class:`~.transforms.LandContinuously`
or, with ``once``, :class:`~.transforms.LandNow` chain per source), runs it
and, when it ends, prints a summary computed from the arrivals log (so the
same after a restart) and the files that are in a landing prefix but not in
the log. Streaming runs as long as the runner runs it (``stop_after`` bounds
it, for tests and for a bounded catch-up); ``once`` is a batch job.

Runners: with no ``--runner`` (or ``DirectRunner``), the pipeline runs on the
FnApiRunner behind the DirectRunner, which runs periodic impulses, state and
timers as the job goes; the DirectRunner's own switch would first try to
download the Prism runner, and its bundle-based streaming runner cannot run
a periodic impulse. ``FlinkRunner`` and ``DataflowRunner`` run it as given,
in streaming mode unless ``once`` (docs/operations.md).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_pipeline.arrivals.stability import is_marker
from beam_pipeline.arrivals.transforms import LandContinuously, LandNow, landing_uri
from beam_pipeline.config.corpus import ConfigError, CorpusConfig
from beam_pipeline.storage.arrivals_log import identity, read_log, summary_lines
from beam_pipeline.storage.bronze import tmp_dir
from beam_pipeline.storage.layers import join, remove_matching


@dataclasses.dataclass(frozen=True)
class LandingResult:
    """What a landing run added to the log, and what it left waiting."""

    new_entries: tuple[dict, ...]
    log: tuple[dict, ...]  # the whole log after the run (what the new entries are summarized against)
    log_length: int
    waiting: dict[str, list[str]]  # source -> files in its landing prefix whose current version is not in the log
    submitted_only: bool = False  # a streaming Dataflow job: submitted, still running


def landing_sources(config: CorpusConfig):
    sources = [s for s in config.sources if s.landing is not None]
    if not sources:
        raise ConfigError("no source has a `landing:` section: nothing to land (docs/config.md, `landing`)")
    return sources


def local_runner(options: PipelineOptions):
    """The runner object for ``options``: the FnApiRunner for a local run, else None (the named runner)."""
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    if name not in (None, "DirectRunner", "SwitchingDirectRunner", "FnApiRunner"):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(
        provision_info=fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    )


def build_landing_pipeline(
    config: CorpusConfig,
    options: PipelineOptions,
    *,
    once: bool,
    stop_after: float | None = None,
    start: float | None = None,
) -> beam.Pipeline:
    """The landing pipeline over every source with a ``landing:`` section."""
    options.view_as(StandardOptions).streaming = not once
    pipeline = beam.Pipeline(runner=local_runner(options), options=options)
    start = time.time() if start is None else start
    for source in landing_sources(config):
        uri = landing_uri(source)
        if once:
            _ = pipeline | f"LandNow[{source.name}]" >> LandNow(config.output_root, source.name, source.landing, uri)
        else:
            _ = pipeline | f"Land[{source.name}]" >> LandContinuously(
                config.output_root, source.name, source.landing, uri, start=start, stop_after=stop_after
            )
    return pipeline


def land_sources(
    config: CorpusConfig,
    options: PipelineOptions,
    *,
    once: bool,
    stop_after: float | None = None,
    log: Callable[[str], None] = print,
) -> LandingResult:
    """Run the landing job; when it ends, summarize what it added to the arrivals log."""
    FileSystems.set_options(options)
    sources = landing_sources(config)
    root = config.output_root
    left = remove_matching(join(tmp_dir(root), "*"))  # copies a killed job never finished
    if left:
        log(f"[land] removed {len(left)} unfinished copies of an earlier run from {tmp_dir(root)}")
    before = {identity(e) for e in read_log(root).entries}
    mode = "once" if once else (f"streaming for {stop_after:g}s" if stop_after else "streaming")
    log(f"[land] landing {', '.join(s.name for s in sources)} into {join(root, 'bronze')} ({mode})")
    pipeline = build_landing_pipeline(config, options, once=once, stop_after=stop_after)
    result = pipeline.run()
    runner = options.view_as(StandardOptions).runner or ""
    if not once and stop_after is None and "Dataflow" in str(runner):
        log(f"[land] streaming job submitted: {getattr(result, 'job_id', lambda: '?')()}; it runs until drained")
        return LandingResult((), (), len(before), {}, submitted_only=True)
    result.wait_until_finish()
    after = read_log(root)
    new = tuple(e for e in after.entries if identity(e) not in before)
    return LandingResult(new, after.entries, len(after), waiting_files(config, after))


def waiting_files(config: CorpusConfig, log_now=None) -> dict[str, list[str]]:
    """Per source, the files of its landing prefix whose current version the log does not hold."""
    known = (log_now or read_log(config.output_root)).known_versions()
    waiting: dict[str, list[str]] = {}
    for source in landing_sources(config):
        for metadata in FileSystems.match([landing_uri(source)])[0].metadata_list:
            if is_marker(metadata.path, source.landing.marker_suffix):
                continue
            version = (int(metadata.size_in_bytes), float(metadata.last_updated_in_seconds or 0.0))
            if version not in known.get((source.name, metadata.path), set()):
                waiting.setdefault(source.name, []).append(metadata.path)
    return waiting


def result_lines(result: LandingResult) -> list[str]:
    """The summary printed when a landing run ends."""
    if result.submitted_only:
        return []
    lines = [
        f"landed      {len(result.new_entries)} arrivals this run; the arrivals log holds {result.log_length}",
        *summary_lines(result.log, {identity(e) for e in result.new_entries}),
    ]
    for source, paths in sorted(result.waiting.items()):
        shown = ", ".join(p.rsplit("/", 1)[-1] for p in sorted(paths)[:10]) + (", ..." if len(paths) > 10 else "")
        lines.append(f"waiting     {source}: {len(paths)} files not landed yet (still changing, or no marker): {shown}")
    return lines
