"""Project options: ``PipelineOptions`` subclasses, one per concern.

Runner settings (``--runner``, ``--project``, ``--direct_num_workers`` ...)
stay standard Beam options; these add what the corpus build needs.
"""
from beam_pipeline.options.corpus_options import CorpusOptions, LocalRunnerDefaults
from beam_pipeline.options.launch_options import LaunchOptions
from beam_pipeline.options.progress_options import ProgressOptions

#: Option classes that are Flex Template parameters (templates/metadata.json, one to one).
TEMPLATE_OPTION_CLASSES = (CorpusOptions, ProgressOptions, LaunchOptions)

__all__ = ["CorpusOptions", "LaunchOptions", "LocalRunnerDefaults", "ProgressOptions", "TEMPLATE_OPTION_CLASSES"]
