"""Options of a corpus build (``--config`` and what may override it)."""
from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.options.validation import Matching


class CorpusOptions(PipelineOptions):
    """Which corpus to build, from which snapshot, into which root."""

    #: the CLI and the template launcher refuse to run without these (metadata.json: isOptional false)
    REQUIRED = ("config",)

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--config", default=None,
            help="Path of the corpus YAML file (sources, stage parameters, policy, tokenizer, "
                 "shard layout, seed, output root). See docs/config.md.")
        parser.add_argument(
            "--output_root", default=None,
            help="Where snapshots, layers, datasets and runs are written (local path, s3://, gs://, "
                 "hdfs://). Overrides output_root in the config.")
        parser.add_argument(
            "--snapshot_id", default=None, type=Matching(r"^[0-9a-f]{24}$", str, "snapshot id"),
            help="Build from this existing snapshot (as printed by the snapshot command). An input "
                 "that changed since then stops the run. Without it, a snapshot is taken first.")
        parser.add_argument(
            "--max_stage_attempts", default=3, type=Matching(r"^[1-9][0-9]?$", int, "number of attempts (1-99)"),
            help="Runs of a stage's job before the build fails when its records do not balance (the "
                 "runner lost or repeated records; the layer is committed only once they balance). "
                 "1 fails at the first imbalance.")


class LocalRunnerDefaults:
    """Beam arguments added when the user names no runner.

    The FnApiRunner behind the DirectRunner needs no network (the Prism
    runner would first try to download a binary). ``multi_processing`` with
    one worker per core uses every core. Not ``multi_threading``: with Beam
    2.77 we saw its GroupByKey lose elements on the sample (docs/decisions.md);
    the accounting check fails such a run, but it is better not to start one.
    """

    @staticmethod
    def apply(beam_args: list[str]) -> list[str]:
        if any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
            return beam_args
        extra = ["--runner=DirectRunner"]
        if not any(a.startswith("--direct_running_mode") for a in beam_args):
            extra.append("--direct_running_mode=multi_processing")
        if not any(a.startswith("--direct_num_workers") for a in beam_args):
            extra.append(f"--direct_num_workers={os.cpu_count() or 1}")
        if "--direct_running_mode=multi_threading" in beam_args:
            logging.getLogger(__name__).warning(
                "--direct_running_mode=multi_threading lost records in GroupByKey in our tests "
                "(docs/decisions.md); prefer multi_processing or in_memory")
        return extra + beam_args
