"""Flex Template launcher: build the job of one corpus build, submit it, and return.

A build is one Beam job (``beam_pipeline.build.corpus_build``): every stage, the dataset's
publication, its lineage, the run metrics and report are steps of it. The
launcher (``templates/launcher.py`` is the ``FLEX_TEMPLATE_PYTHON_PY_FILE``)
does what ``python -m beam_pipeline run`` does before the job starts (load
the config, take or load the snapshot, look up which layers are committed,
build the graph) and submits the job without waiting for it. Re-launching
the template resumes at the first layer the earlier job did not commit.

Arguments are the template parameters (:class:`~beam_pipeline.options.CorpusOptions`:
``--config``, ``--output_root``, ``--snapshot_id``; ``templates/metadata.json``)
plus Beam's options. What only a waiting driver does (``--max_stage_attempts``:
running the job again when a stage's records did not balance) is not a
template parameter: a template launch is one job; launch again to retry.

Local check (no cloud)::

    python -m beam_pipeline.build.launcher --config sample/corpus.yaml --output_root out/launch \\
        --runner=DirectRunner
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.config.corpus import ConfigError, CorpusConfig, load_config
from beam_pipeline.options import CorpusOptions, LocalRunnerDefaults
from beam_pipeline.storage.layers import read_bytes

_LOGGER = logging.getLogger("beam_pipeline.build.launcher")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the template parameters, Beam's arguments)."""
    parser = argparse.ArgumentParser(prog="beam_pipeline.build.launcher", description=__doc__.split("\n\n")[0])
    CorpusOptions._add_argparse_args(parser)
    args, beam_args = parser.parse_known_args(argv)
    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file to build (see docs/config.md)")
    return args, beam_args


def load_any_config(path: str, output_root: str | None) -> CorpusConfig:
    """Load a config from a local path or any Beam filesystem (gs://, s3://).

    A config read from an object store must use absolute URIs: relative paths
    resolve against the config's folder, which only a local file has.
    """
    if os.path.exists(path) or "://" not in path:
        config = load_config(path)
    else:
        with tempfile.TemporaryDirectory(prefix="corpus-config-") as folder:
            local = os.path.join(folder, os.path.basename(path) or "corpus.yaml")
            try:
                data = read_bytes(path)
            except Exception as err:  # noqa: BLE001 - any filesystem's "not found"
                raise ConfigError(f"config file not readable: {path}: {err}") from None
            with open(local, "wb") as f:
                f.write(data)
            config = load_config(local)
            if folder in config.model_dump_json():
                raise ConfigError(
                    f"{path}: a config read from an object store must use absolute URIs "
                    f"(sources, tokenizer, output_root, model and eval-set paths); "
                    f"relative paths only work in a local config file"
                )
    if output_root:
        config = config.model_copy(update={"output_root": output_root})
    return config


def launch(argv: list[str], runner=None, before_run=None):
    """Build the job and submit it; return its result without waiting for it."""
    from beam_pipeline.build.corpus_build import CorpusBuild

    args, beam_args = parse(argv)
    options = PipelineOptions(LocalRunnerDefaults.apply(beam_args))
    FileSystems.set_options(options)
    config = load_any_config(args.config, args.output_root)
    build = CorpusBuild(config, options, snapshot_id=args.snapshot_id, log=_LOGGER.info, before_run=before_run)
    result = build.submit(runner=runner)  # never wait_until_finish: a Flex Template launch must return
    try:
        job = f" {result.job_id()}"
    except Exception:  # noqa: BLE001 - no job id (template file written, local runner, dry run)
        job = ""
    _LOGGER.warning("submitted the build's job%s (state %s)", job, getattr(result, "state", "?"))
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO)
    try:
        launch(sys.argv[1:] if argv is None else argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
