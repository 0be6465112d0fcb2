"""The exit codes of ``python -m beam_pipeline`` and the one error a user sees.

Part of the package face: every layer may raise :class:`UserError` (an output
root nobody can write, a lease another build holds, a folder that holds no
dataset), and a script that calls the command line reads these codes
(docs/config.md, "Exit codes"). :mod:`beam_pipeline.cli.usage` turns a
:class:`UserError` into one line on stderr and its exit code.
"""

from __future__ import annotations

#: Exit codes of ``python -m beam_pipeline`` (documented in docs/config.md, "Exit codes").
EXIT_FAILED = 1  # the build (or a dataset command) ran and failed: a stage, accounting, verification
EXIT_USAGE = 2  # the command line or the config is wrong: unknown option, bad runner, config error
EXIT_NOT_FOUND = 3  # what the command was pointed at is not there or not of its kind (no dataset manifest)
EXIT_NOT_WRITABLE = 4  # the output root cannot be written
EXIT_BUSY = 75  # another build holds the output root's lease (sysexits' EX_TEMPFAIL: try again later)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

EXIT_CODES = {
    "failed": EXIT_FAILED,
    "usage": EXIT_USAGE,
    "not found": EXIT_NOT_FOUND,
    "not writable": EXIT_NOT_WRITABLE,
    "busy": EXIT_BUSY,
    "interrupted": EXIT_INTERRUPTED,
}


class UserError(Exception):
    """A mistake of the user: printed as ``error: <message>`` and ended with :attr:`exit_code`."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
