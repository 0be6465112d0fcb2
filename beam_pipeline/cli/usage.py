"""User errors of the command line: checked before any work starts, reported in one line.

A mistake of the user (a mistyped option, a runner Beam does not have, an
output root nobody can write, a folder that holds no dataset) is one line on
stderr that names the problem and the fix, and a distinct exit code
(:data:`EXIT_CODES`, ``docs/config.md``, "Exit codes"). Tracebacks are for
real bugs, or with ``--verbose``.

Unknown options: the arguments a command does not define are Apache Beam
pipeline options; one that neither the command nor any ``PipelineOptions``
class defines would be dropped by Beam with a warning among many (a build into
the config's default output root instead of ``--output-root``'s), so it is
refused here with the closest valid option (:func:`check_options`).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import sys

from beam_pipeline.errors import EXIT_NOT_FOUND, EXIT_NOT_WRITABLE, EXIT_USAGE, UserError


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command's ``--help`` (not usage + error);
    like argparse, it ends with ``SystemExit(2)``."""

    def error(self, message: str):
        report(UserError(f"{self.prog}: {message} (see `{self.prog} --help`)"))
        raise SystemExit(EXIT_USAGE)


# --- unknown options --------------------------------------------------------------------------------


def beam_option_parser() -> argparse.ArgumentParser:
    """Every option of every ``PipelineOptions`` class Beam (and this project) defines, as Beam parses them."""
    from apache_beam.options.pipeline_options import PipelineOptions

    import beam_pipeline.options  # noqa: F401 - registers CorpusOptions and the template parameters

    parser = _Quiet(allow_abbrev=False, add_help=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


class _Quiet(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"Beam option: {message}")

    def add_argument(self, *args, **kwargs):
        try:
            return super().add_argument(*args, **kwargs)
        except argparse.ArgumentError:  # two classes define the same option (Beam tolerates that too)
            return None


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for action in parser._actions for s in action.option_strings if s.startswith("--")})


def check_options(
    extra: list[str], command: str, command_parser: argparse.ArgumentParser | None, beam_options: bool = True
) -> None:
    """Refuse the first of ``extra`` (what ``command``'s parser left) that no one defines.

    With a runner that has a job server (:data:`PORTABLE_RUNNERS`), an option Python does not
    know goes to the job server, which knows its own; it is refused only when it is close to one
    Python or the command knows (a typo, most likely).

    ``beam_options``: whether the command passes its leftovers to Beam (``run``, ``snapshot``, ...);
    else every leftover is unknown.
    """
    if not extra:
        return
    unknown = extra
    beam_parser = None
    if beam_options:
        beam_parser = beam_option_parser()
        _, unknown = beam_parser.parse_known_args(extra)
    if not unknown:
        return
    first = next((arg for arg in unknown if arg.startswith("-")), unknown[0])
    if not first.startswith("-"):
        raise UserError(f"{command}: unexpected argument {first!r} (see `python -m beam_pipeline {command} --help`)")
    name = first.split("=", 1)[0]
    candidates = option_names(command_parser) if command_parser is not None else []
    if beam_parser is not None:
        candidates += option_names(beam_parser)
    hint = closest_option(name, candidates)
    if hint is None and beam_options and _runner_has_job_server(extra):
        return  # the job server's own options (Flink's --checkpointing_interval): it checks them itself
    message = f"{command}: unknown option {name}"
    if hint:
        message += f"; did you mean {hint}?"
    else:
        message += f" (see `python -m beam_pipeline {command} --help`" + (
            "; other options go to Apache Beam and must be one of its pipeline options)" if beam_options else ")"
        )
    raise UserError(message)


#: Runners whose job server (Java) has pipeline options of its own that Python does not list.
PORTABLE_RUNNERS = ("FlinkRunner", "PortableRunner", "SparkRunner")


def _runner_has_job_server(args: list[str]) -> bool:
    from beam_pipeline.options.corpus_options import flag_value

    return (flag_value(args, "runner") or "").rsplit(".", 1)[-1] in PORTABLE_RUNNERS


def closest_option(name: str, candidates: list[str]) -> str | None:
    """The valid option a mistyped one most likely meant: ``--output-root`` -> ``--output_root``."""

    def norm(option: str) -> str:
        return option.lstrip("-").replace("-", "_").lower()

    by_norm = {}
    for candidate in candidates:
        by_norm.setdefault(norm(candidate), candidate)
    if norm(name) in by_norm:
        return by_norm[norm(name)]
    close = difflib.get_close_matches(norm(name), list(by_norm), n=1, cutoff=0.75)
    return by_norm[close[0]] if close else None


# --- runner -----------------------------------------------------------------------------------------


def check_runner(beam_args: list[str]) -> None:
    """Refuse a ``--runner`` Beam cannot create (before a snapshot is taken or a job is built)."""
    from beam_pipeline.options.corpus_options import flag_value

    runner = flag_value(beam_args, "runner")
    if runner is None:
        return
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners import runner as beam_runner

    try:
        beam_runner.create_runner(runner)
    except (ValueError, ImportError, AttributeError) as err:
        known = sorted(StandardOptions.KNOWN_RUNNER_NAMES)
        hint = closest_option(runner, known)
        if "." in runner:  # a class path that does not import
            raise UserError(f"--runner={runner}: cannot create this runner ({_first_line(err)})") from None
        raise UserError(
            f"--runner={runner}: Beam has no such runner; "
            + (f"did you mean --runner={hint}? " if hint else "")
            + f"Known: {', '.join(known)} (or a runner class's full path)"
        ) from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


# --- output root ------------------------------------------------------------------------------------


def check_config_path(path: str | None) -> None:
    """Refuse a ``--config`` that is a folder (naming the YAML files in it)."""
    if path and "://" not in path and os.path.isdir(path):
        found = sorted(name for name in os.listdir(path) if name.endswith((".yaml", ".yml")))
        best = "corpus.yaml" if "corpus.yaml" in found else (found[0] if found else None)
        hint = f", e.g. {os.path.join(path, best)}" if best else ""
        raise UserError(f"--config {path} is a folder: pass the corpus YAML file{hint}")


#: errno -> exit code of an OSError on a path the user gave (see :func:`os_error`).
_OS_ERRORS = {
    errno.EACCES: EXIT_NOT_WRITABLE,
    errno.EPERM: EXIT_NOT_WRITABLE,
    errno.EROFS: EXIT_NOT_WRITABLE,
    errno.ENOSPC: EXIT_NOT_WRITABLE,
    errno.ENOENT: EXIT_NOT_FOUND,
    errno.ENOTDIR: EXIT_NOT_FOUND,
    errno.EISDIR: EXIT_NOT_FOUND,
}


def os_error(err: OSError) -> UserError | None:
    """A user's path that cannot be read or written, as a one-line error (None: not one of those)."""
    if err.errno not in _OS_ERRORS:
        return None
    where = f": {err.filename}" if err.filename else ""
    return UserError(f"{err.strerror or err}{where}", _OS_ERRORS[err.errno])


def report(err: UserError | Exception, exit_code: int | None = None) -> int:
    """Print ``error: <message>`` (one line) and return the exit code."""
    message = " ".join(str(err).split()) if isinstance(err, UserError) else str(err)
    print(f"error: {message}", file=sys.stderr)
    return exit_code if exit_code is not None else getattr(err, "exit_code", EXIT_USAGE)
