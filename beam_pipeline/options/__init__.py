"""Project options: ``PipelineOptions`` subclasses, one per concern.

Runner settings (``--runner``, ``--project``, ``--direct_num_workers`` ...)
stay standard Beam options; these add what the corpus build needs.
"""

from beam_pipeline.options.corpus_options import (
    CorpusOptions,
    LocalRunnerDefaults,
    RunnerError,
    add_driver_arguments,
    flink_job_server_jar,
)

#: Option classes that are Flex Template parameters (templates/metadata.json, one to one).
TEMPLATE_OPTION_CLASSES = (CorpusOptions,)

__all__ = [
    "CorpusOptions",
    "LocalRunnerDefaults",
    "RunnerError",
    "TEMPLATE_OPTION_CLASSES",
    "add_driver_arguments",
    "flink_job_server_jar",
]
