"""Options of the Flex Template launcher (beam_pipeline/launcher.py)."""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.options.validation import Matching


class LaunchOptions(PipelineOptions):
    """The one-worker driver job a template launch submits (docs/dataflow.md)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--driver_machine_type", default="n1-standard-2",
            type=Matching(r"^[a-z][a-z0-9-]*$", str, "machine type"),
            help="Machine type of the one-worker job that runs the build driver when launched from "
                 "the Flex Template; the driver submits one job per stage and waits for each. The "
                 "stage jobs use the usual worker options (--machine_type, --max_num_workers).")
