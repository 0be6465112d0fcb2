"""Project options: ``PipelineOptions`` subclasses, one per concern.

Runner settings (``--runner``, ``--project``, ``--direct_num_workers`` ...)
stay standard Beam options; these add what the corpus build needs.
"""
from beam_pipeline.options.corpus_options import CorpusOptions, LocalRunnerDefaults

__all__ = ["CorpusOptions", "LocalRunnerDefaults"]
