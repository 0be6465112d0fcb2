"""Options of the progress lines a build prints while a stage runs."""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.options.validation import Matching


class ProgressOptions(PipelineOptions):
    """How often a running stage reports the records it has seen (beam_pipeline/progress.py)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--progress_interval", default=30.0,
            type=Matching(r"^[0-9]+(\.[0-9]+)?$", float, "number of seconds"),
            help="Seconds between progress lines while a stage runs ('[stage] N records so far, "
                 "elapsed'); 0 turns them off. Progress never changes what a build writes.")
