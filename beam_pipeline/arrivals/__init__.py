"""Arrivals: the bronze landing layer and the snapshots that freeze it (docs/operations.md).

Files keep arriving in a source's landing prefix (crawler output, dumps,
licensed deliveries), often while they are still being written. The landing
job (``python -m beam_pipeline land``) watches each prefix with Beam's own
continuous matching, waits until a file is complete, copies it once into the
content-addressed bronze layer and appends it to the arrivals log, committed
per window. ``snapshot --from-bronze --until ...`` freezes a prefix of that
log into an ordinary snapshot manifest; a build reads only snapshots.

Modules, in the order the data flows:

* :mod:`~beam_pipeline.config.landing`     the ``landing:`` section of a source;
* :mod:`~beam_pipeline.arrivals.stability`  when a file is complete (pure functions);
* :mod:`~beam_pipeline.storage.bronze`     where objects and log segments live;
* :mod:`~beam_pipeline.storage.arrivals_log`        the arrivals log: entries, order, positions, summaries;
* :mod:`~beam_pipeline.arrivals.transforms` the landing job's composite transforms and DoFns;
* :mod:`~beam_pipeline.arrivals.landing`    the job: build, run, summarize;
* :mod:`~beam_pipeline.arrivals.gc`         ``bronze gc``;
* :mod:`~beam_pipeline.arrivals.report`     a bronze snapshot's arrivals, for the run report;
* :mod:`~beam_pipeline.cli.arrivals`   the ``land`` and ``bronze`` commands.

Layout and formats: ``docs/format.md`` ("Bronze layer and arrivals log").
"""
