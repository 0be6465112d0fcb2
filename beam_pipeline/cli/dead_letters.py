"""Reading the dead letters: what a build that stopped on them prints, and ``dead-letter <output_root>``.

Every stage writes the records it could not process to
``<root>/dead_letter/<stage>/<layer_key>/part-*.parquet`` (schema
``schemas.DEAD_LETTER``: stage, source, file, position, byte_offset, doc_id,
error, the first bytes of the raw record), also when the build then stops
because there are too many (``accounting.max_dead_letter_fraction``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.storage.layers import join, read_parquet

#: Records shown when a build stops on its dead letters (``dead-letter`` shows ``--limit``).
SHOWN_ON_STOP = 3


@dataclasses.dataclass(frozen=True)
class DeadLetterFolder:
    stage: str
    key: str
    path: str
    parts: tuple[str, ...]


def folders(root: str, stage: str | None = None, key: str | None = None) -> list[DeadLetterFolder]:
    """The dead-letter folders under ``root`` that hold partitions (of ``stage`` / layer ``key`` if given)."""
    pattern = join(root, "dead_letter", stage or "*", key or "*", "part-*.parquet")
    found: dict[tuple[str, str], list[str]] = {}
    for match in FileSystems.match([pattern])[0].metadata_list:
        parts = match.path.rstrip("/").rsplit("/", 3)
        found.setdefault((parts[-3], parts[-2]), []).append(match.path)
    return [
        DeadLetterFolder(s, k, join(root, "dead_letter", s, k), tuple(sorted(paths)))
        for (s, k), paths in sorted(found.items())
    ]


def records(folder: DeadLetterFolder, limit: int | None = None) -> tuple[list[dict], int]:
    """(the first ``limit`` records of a folder in their stored order, how many it holds)."""

    shown, total = [], 0
    for path in folder.parts:
        with FileSystems.open(path) as f:
            table = read_parquet(f, ["stage", "source", "file", "position", "byte_offset", "doc_id", "error"])
        total += table.num_rows
        if limit is None or len(shown) < limit:
            shown += table.slice(0, None if limit is None else limit - len(shown)).to_pylist()
    return shown, total


def describe(row: dict) -> str:
    """One dead letter in one line: where it came from and why."""
    where = []
    if row.get("file"):
        where.append(row["file"])
    if row.get("position") is not None:
        where.append(
            f"record {row['position']}"
            + (" (line {})".format(row["position"] + 1) if _line_based(row.get("file")) else "")
        )
    if row.get("byte_offset") is not None:
        where.append(f"byte {row['byte_offset']}")
    if row.get("doc_id"):
        where.append(f"doc_id {row['doc_id']}")
    origin = ", ".join(where) or "unknown origin"
    source = f"[{row['source']}] " if row.get("source") else ""
    return f"{source}{origin}: {' '.join(str(row.get('error') or '').split())}"


def _line_based(path: str | None) -> bool:
    name = (path or "").lower()
    for suffix in (".gz", ".zst", ".zstd", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    return name.endswith((".jsonl", ".json", ".ndjson"))


def stop_message(failure) -> list[str]:
    """Lines after a failed build's error: for each failed layer with dead letters, where they are and
    the first few (``stage_failure.StageFailed.layers``)."""
    lines = []
    for layer in getattr(failure, "layers", []) or []:
        for folder in folders(layer.root, layer.stage, layer.key):
            shown, total = records(folder, SHOWN_ON_STOP)
            lines.append(
                f"dead letters: {total} records of {folder.stage} in {folder.path}/ (first {len(shown)}; "
                f"all: python -m beam_pipeline dead-letter {layer.root} --stage {folder.stage})"
            )
            lines += [f"  {describe(row)}" for row in shown]
    return lines


class RunnerLogsOfADeadLetterStop(logging.Filter):
    """Drops the runner's error logs of a dead-letter stop (the commit step's ``AccountingError``, with
    its tracebacks from the worker and the runner): the CLI reports the stop itself, in one line, with
    where the dead letters are and the first of them (:func:`stop_message`)."""

    MARK = "max_dead_letter_fraction"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += str(record.exc_info[1])
        return self.MARK not in text


def quiet_dead_letter_stops() -> None:
    """Install :class:`RunnerLogsOfADeadLetterStop` on the root logger's handlers (the driver's log output)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()  # what the first warning of a job would do anyway
    from beam_pipeline.cli.console import RunLogHandler

    for handler in root.handlers:
        if isinstance(handler, RunLogHandler):
            continue  # the run's beam.log keeps the runner's tracebacks (docs/operations.md, "The console")
        if not any(isinstance(f, RunnerLogsOfADeadLetterStop) for f in handler.filters):
            handler.addFilter(RunnerLogsOfADeadLetterStop())


def cli_dead_letter(args) -> int:
    """``python -m beam_pipeline dead-letter <output_root> [--stage S] [--limit N]``."""
    if "://" not in args.output_root and not os.path.isdir(args.output_root):
        from beam_pipeline.errors import EXIT_NOT_FOUND

        print(
            f"error: no output root at {args.output_root}: pass the folder a build wrote (its output_root)",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    found = folders(args.output_root.rstrip("/"), args.stage)
    if not found:
        print(f"no dead letters under {args.output_root}" + (f" for stage {args.stage}" if args.stage else ""))
        return 0
    for folder in found:
        shown, total = records(folder, args.limit or None)
        print(f"{folder.stage} {folder.key}: {total} records in {folder.path}/")
        for row in shown:
            print(f"  {describe(row)}")
        if len(shown) < total:
            print(f"  ... {total - len(shown)} more (--limit 0 lists all)")
    return 0
