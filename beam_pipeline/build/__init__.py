"""One build: a config in, one Beam job, a dataset out (docs/layout.md).

* ``corpus_build``  :class:`~beam_pipeline.build.corpus_build.CorpusBuild`: the stages in order, resume, the job's runs
* ``build_graph``   :class:`~beam_pipeline.build.build_graph.BuildGraph`: each layer reused or computed and committed
* ``stage_failure`` a failed job's message: the stage and the root cause
* ``launcher``      the Flex Template's entry (``python -m beam_pipeline.build.launcher``)
* ``progress``      the build's progress line and its record balance
* ``code_version``  a stage's version from the code it runs (part of every layer key)
* ``lease``         the output root's lease: one build at a time
* ``stage_seconds`` per-stage wall and CPU seconds for ``metrics.json``
* ``plan_routes``   how many routes Beam's optimizer walks in the build's graph
"""
