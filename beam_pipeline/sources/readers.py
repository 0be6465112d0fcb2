"""Record readers: turn one input file into a stream of raw records or bad records.

Pure Python, no Beam transforms. The ingest stage calls :func:`iter_records`
inside a DoFn and routes every :class:`BadRecord` to a dead-letter output, so
one bad record never costs the rest of its file.

Formats (``FORMATS``)
---------------------
``jsonl``
    One JSON object per line; ``.jsonl``, ``.jsonl.gz`` and ``.jsonl.zst``.
    Lines are split on ``b"\\n"`` only, a trailing ``b"\\r"`` is dropped (CRLF
    files work) and a UTF-8 byte order mark at the very start of the file is
    ignored. ``position`` is the 0-based line index, counting every line
    (blank and bad ones included); ``byte_offset`` is the offset of the line's
    first byte in the decompressed stream. A final line without a newline at a
    clean end of file is an ordinary record.
``parquet``
    One record per row, read row group by row group and only the columns
    needed. ``position`` is the row index in the file, ``byte_offset`` None.
``text``
    The whole (decompressed) file is one document: UTF-8 decoded with
    ``errors="replace"`` so a bad byte costs one U+FFFD, not the file;
    ``position`` and ``byte_offset`` are 0 and the optional fields are None.
``warc``
    WARC, WET and ARC files (plain or gzip), read by :mod:`beam_pipeline.web`:
    one record per page whose text the source's ``extract`` settings keep
    (HTML to text); ``position`` and ``byte_offset`` are the record's stored
    offset (docs/web.md). Records the policy filters are not yielded. The
    ingest stage reads web archives in byte ranges instead (``web.transforms``).

Optional fields (url, date, license, record id) are None when absent or
JSON null, else ``str(value)``. An empty text (``""``) is a record, not a bad
record: the caller decides what to do with it.

Field names are paths (:func:`~beam_pipeline.records.record_types.field_path_problem` says which are valid): a
name with dots such as ``metadata.url`` reaches into nested objects (JSONL)
or struct columns (Parquet), the layout of datatrove, Dolma and FineWeb
exports. A key (or top-level column) spelled exactly like the whole name wins,
so flattened exports keep working. A path that ends early (a key absent or an
object null on the way) is an absent value: None for the optional fields, a
missing text field for the text. A path that runs into a value that is not an
object (``metadata`` is a string, an array, ...) is a dead letter for that
record, since the record's layout is not the one the config describes.

Dead-letter rules (each yields a :class:`BadRecord` and reading goes on)
-------------------------------------------------------------------------
* jsonl line that is not valid UTF-8 (``invalid utf-8 at byte N``, N counted
  from the start of the line), not valid JSON (including a raw NUL byte; a
  ``\\u0000`` escape inside a string is fine), not an object (array, number,
  string, boolean, null), without the text field, whose text is not a string,
  whose fields hold an unpaired UTF-16 surrogate escape such as ``\\ud800``
  (such a string cannot be encoded as UTF-8 further down the pipeline), or
  where a field path runs through a value that is not an object.
  Blank and whitespace-only lines are skipped silently.
* Any line or text file larger than ``max_record_bytes``: it is never held in
  memory; the reader keeps its first 256 bytes, skips the rest, and reports
  the true size (``record of N bytes exceeds max_record_bytes=M``).
* parquet: a file that is not parquet, or lacks the text column, is ONE bad
  record for the whole file; an unreadable row group is one bad record for
  that group; a null, non-string, undecodable or oversized text, or a field
  path through a value that is not a struct, is a bad record for that row.

Compression
-----------
Chosen by file suffix: ``.gz``/``.gzip`` is gzip, ``.zst``/``.zstd`` is zstd,
anything else is read as is (``text`` files may be compressed too). The
reader decompresses itself, streaming in ``chunk_size`` pieces
(``sources/byte_streams.py`` says how).

A compressed stream that ends inside a member/frame ("truncated") or fails to
decode ("corrupt") yields every complete line decoded before the damage, then
exactly ONE BadRecord naming the codec, and stops. That bad record has the
position of the next line, the decompressed offset where the unfinished data
starts, and the first bytes of that unfinished tail: an incomplete last line
of a damaged stream is never parsed as a record.

I/O errors raised by ``open_binary`` or the file object propagate unchanged,
so the runner can retry them.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import json
import re
from typing import BinaryIO, Callable, Iterator, NamedTuple

from beam_pipeline.records.record_types import BadRecord, RawRecord
from beam_pipeline.sources.byte_streams import PREFIX_BYTES, DamagedStream, SourceLine, decompressed_chunks, split_lines
from beam_pipeline.web.records import iter_raw_records

FORMATS = ("jsonl", "parquet", "text", "warc")

_PARQUET_BATCH_ROWS = 1024
_UTF8_BOM = "\ufeff"


@dataclasses.dataclass(frozen=True)
class _FieldNames:
    text: str
    url: str
    date: str
    license: str
    record_id: str

    def optional(self) -> tuple[str, ...]:
        return (self.url, self.date, self.license, self.record_id)


def iter_records(
    open_binary: Callable[[], BinaryIO],
    path: str,
    fmt: str,
    *,
    text_field: str = "text",
    url_field: str = "url",
    date_field: str = "date",
    license_field: str = "license",
    id_field: str = "id",
    max_record_bytes: int = 8 << 20,
    chunk_size: int = 1 << 20,
    extract: dict | None = None,
) -> Iterator[RawRecord | BadRecord]:
    """Yield every record of one file as a RawRecord, or a BadRecord if unreadable.

    open_binary: zero-arg callable returning a readable binary file object of
    the RAW (possibly compressed) file bytes, e.g. ``lambda:
    FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)``
    or ``lambda: open(path, "rb")``. path only chooses the decompressor (by
    suffix) and appears in messages. Arguments are checked at call time; the
    file is opened when iteration starts and closed when it ends.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} for {path}; expected one of {FORMATS}")
    if max_record_bytes <= 0 or chunk_size <= 0:
        raise ValueError(f"max_record_bytes and chunk_size must be positive, got {max_record_bytes} and {chunk_size}")
    fields = _FieldNames(text_field, url_field, date_field, license_field, id_field)
    if fmt == "warc":  # extract: the source's `extract` settings (defaults if None)
        return iter_raw_records(open_binary, extract, max_record_bytes)
    if fmt == "parquet":
        return _iter_parquet(open_binary, fields, max_record_bytes)
    if fmt == "text":
        return _iter_text(open_binary, path, max_record_bytes, chunk_size)
    return _iter_jsonl(open_binary, path, fields, max_record_bytes, chunk_size)


# --------------------------------------------------------------------------
# JSONL


def _iter_jsonl(
    open_binary: Callable[[], BinaryIO],
    path: str,
    fields: _FieldNames,
    max_record_bytes: int,
    chunk_size: int,
) -> Iterator[RawRecord | BadRecord]:
    with contextlib.closing(open_binary()) as fileobj:
        chunks = decompressed_chunks(fileobj, path, chunk_size)
        for line in split_lines(chunks, max_record_bytes):
            if isinstance(line, BadRecord):
                yield line
                continue
            record = _parse_line(line, fields, max_record_bytes)
            if record is not None:
                yield record


def _parse_line(line: SourceLine, fields: _FieldNames, max_record_bytes: int) -> RawRecord | BadRecord | None:
    """One jsonl line to a record; None for a blank line."""
    position, byte_offset, data, size, oversized = line
    if oversized:
        error = f"record of {size} bytes exceeds max_record_bytes={max_record_bytes}"
        return BadRecord(position, byte_offset, error, data)
    if data.endswith(b"\r"):
        data = data[:-1]
    if not data or data.isspace():
        return None
    try:
        return _record_from_json(data, position, byte_offset, fields)
    except _BadLine as bad:
        return BadRecord(position, byte_offset, str(bad), data[:PREFIX_BYTES])


class _BadLine(Exception):
    """Why a jsonl line is not a usable record (becomes BadRecord.error)."""


def _record_from_json(data: bytes, position: int, byte_offset: int, fields: _FieldNames) -> RawRecord:
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadLine(f"invalid utf-8 at byte {exc.start}") from None
    if byte_offset == 0 and line.startswith(_UTF8_BOM):
        line = line[1:]
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _BadLine(f"json: {exc.msg} (char {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep, huge integers
        raise _BadLine(f"json: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, dict):
        raise _BadLine(f"record is a JSON {_json_type(value)}, expected an object")

    try:
        text = _field_value(value, fields.text)
        if text is _MISSING:
            raise _BadLine(f"missing text field {fields.text!r}")
        if not isinstance(text, str):
            raise _BadLine(f"text field {fields.text!r} is not a string (got {_json_type(text)})")
        url, date, license_, record_id = (_optional_str(_field_value(value, name)) for name in fields.optional())
    except _NotAnObject as exc:
        raise _BadLine(str(exc)) from None
    if _SURROGATE_ESCAPE.search(data):  # rare; one fast pass over the line
        _reject_unpaired_surrogates(fields, text, url, date, license_, record_id)
    return RawRecord(position, byte_offset, text, url, date, license_, record_id)


_MISSING = object()

# An unpaired surrogate in a parsed string can only come from such an escape.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


class _NotAnObject(Exception):
    """A field path runs into a value that is not an object (becomes a per-record dead letter)."""


def _field_value(record: dict, name: str) -> object:
    """The value at field path ``name`` in ``record``; _MISSING if the path ends early.

    A key spelled exactly like the whole name wins over the nested path.
    """
    value = record.get(name, _MISSING)
    if value is not _MISSING or "." not in name:
        return value
    return _nested_value(record, name, name.split("."))


def _nested_value(value: object, name: str, segments: list[str], start: int = 0) -> object:
    """Follow ``segments[start:]`` from ``value``; None or an absent key on the way gives _MISSING."""
    for depth in range(start, len(segments)):
        key = segments[depth]
        if value is None:
            return _MISSING
        if not isinstance(value, dict):
            where = ".".join(segments[:depth])
            raise _NotAnObject(f"field {name!r}: {where!r} is {_type_name(value)}, not an object")
        value = value.get(key, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def _json_type(value: object) -> str:
    return _JSON_TYPE_NAMES.get(type(value), "number")


def _type_name(value: object) -> str:
    """'a string', 'an array', ... for messages; Arrow's other Python values by their type."""
    kind = _JSON_TYPE_NAMES.get(type(value)) or ("number" if isinstance(value, (int, float)) else type(value).__name__)
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _optional_str(value: object) -> str | None:
    if value is None or value is _MISSING:
        return None
    return value if isinstance(value, str) else str(value)


def _reject_unpaired_surrogates(fields: _FieldNames, *values: str | None) -> None:
    """Raise _BadLine if a field holds a lone surrogate (it could never be encoded as UTF-8)."""
    for name, value in zip((fields.text, *fields.optional()), values):
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            where = f"\\u{ord(value[exc.start]):04x} at char {exc.start}"
            raise _BadLine(f"field {name!r} has an unpaired surrogate {where}") from None


# --------------------------------------------------------------------------
# Text


def _iter_text(
    open_binary: Callable[[], BinaryIO], path: str, max_record_bytes: int, chunk_size: int
) -> Iterator[RawRecord | BadRecord]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoded: list[str] = []
    head = b""
    size = 0
    with contextlib.closing(open_binary()) as fileobj:
        try:
            for chunk in decompressed_chunks(fileobj, path, chunk_size):
                if len(head) < PREFIX_BYTES:
                    head += chunk[: PREFIX_BYTES - len(head)]
                size += len(chunk)
                if size <= max_record_bytes:
                    decoded.append(decoder.decode(chunk))
                else:
                    decoded.clear()  # too big: from now on only count
        except DamagedStream as damage:
            yield BadRecord(0, 0, damage.describe(0), head)
            return
    if size > max_record_bytes:
        yield BadRecord(0, 0, f"record of {size} bytes exceeds max_record_bytes={max_record_bytes}", head)
        return
    decoded.append(decoder.decode(b"", final=True))
    text = "".join(decoded)
    if text.startswith(_UTF8_BOM):
        text = text[1:]
    yield RawRecord(0, 0, text, None, None, None, None)


# --------------------------------------------------------------------------
# Parquet


def _iter_parquet(
    open_binary: Callable[[], BinaryIO], fields: _FieldNames, max_record_bytes: int
) -> Iterator[RawRecord | BadRecord]:
    import pyarrow.parquet as pq  # imported here: jsonl/text workers need not load Arrow

    with contextlib.closing(open_binary()) as fileobj:
        try:
            parquet = pq.ParquetFile(fileobj)
        except Exception as exc:
            if not _is_parquet_data_error(exc):
                raise
            yield BadRecord(0, None, f"not a parquet file: {exc}", _file_head(fileobj))
            return
        schema = parquet.schema_arrow
        selections = {name: _parquet_selection(schema, name) for name in (fields.text, *fields.optional())}
        if selections[fields.text] is None:
            found = ", ".join(schema.names) or "(none)"
            yield BadRecord(0, None, f"missing text column {fields.text!r}; columns found: {found}", b"")
            return
        # The text's column first, no repeats: Arrow reads only these (a struct's selected children only).
        columns = list(dict.fromkeys(selection.read for selection in selections.values() if selection))
        first_row = 0
        for group in range(parquet.num_row_groups):
            yield from _read_row_group(parquet, group, first_row, columns, fields, selections, max_record_bytes)
            first_row += parquet.metadata.row_group(group).num_rows


class _Selection(NamedTuple):
    """Where a field path is in a Parquet file."""

    read: str  # what Arrow is asked to read: a column or a dotted path into struct columns
    column: str  # the top-level column that holds the value in a read batch
    below: tuple[str, ...]  # the path from that column's values to the field's value


def _parquet_selection(schema, name: str) -> _Selection | None:
    """Where field path ``name`` is in a file of this schema; None if no column holds it.

    A top-level column spelled like the whole name wins. A path through struct
    columns reads only the struct's child it names; a path into a column that
    is not a struct reads that column, and each row becomes a dead letter
    (``_nested_value``).
    """
    import pyarrow as pa

    if name in schema.names:
        return _Selection(name, name, ())
    top, *below = name.split(".")
    if not below or top not in schema.names:
        return None
    value_type = schema.field(top).type
    for key in below:
        if not pa.types.is_struct(value_type):
            return _Selection(top, top, tuple(below))
        index = value_type.get_field_index(key)
        if index < 0:  # no such child: the value is absent in every row
            return None
        value_type = value_type.field(index).type
    return _Selection(name, top, tuple(below))


def _read_row_group(
    parquet,
    group: int,
    first_row: int,
    columns: list[str],
    fields: _FieldNames,
    selections: dict[str, _Selection | None],
    max_record_bytes: int,
) -> Iterator[RawRecord | BadRecord]:
    """Rows of one row group; the unreadable rest of a group becomes one BadRecord."""
    position = first_row
    end = first_row + parquet.metadata.row_group(group).num_rows
    batches = parquet.iter_batches(  # on the calling thread: beam_pipeline.storage.layers.read_parquet says why
        batch_size=_PARQUET_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False
    )
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:
            if not _is_parquet_data_error(exc):
                raise
            error = f"unreadable parquet row group {group}, rows {position}..{end - 1} lost: {exc}"
            yield BadRecord(position, None, error, b"")
            return
        if batch is None:
            return
        yield from _rows_of_batch(batch, position, fields, selections, max_record_bytes)
        position += batch.num_rows


def _field_column(batch, name: str, selection: _Selection | None) -> list:
    """Values of field ``name`` in every row: a value, _MISSING, _Undecodable or _NotAnObject."""
    if selection is None:
        return [_MISSING] * batch.num_rows
    values = _column_values(batch.column(selection.column))
    if not selection.below:
        return values
    segments = name.split(".")
    start = len(segments) - len(selection.below)
    nested = []
    for value in values:
        if not isinstance(value, _Undecodable):
            try:
                value = _nested_value(value, name, segments, start)
            except _NotAnObject as exc:
                value = exc
        nested.append(value)
    return nested


def _rows_of_batch(
    batch, first_row: int, fields: _FieldNames, selections: dict[str, _Selection | None], max_record_bytes: int
) -> Iterator[RawRecord | BadRecord]:
    texts = _field_column(batch, fields.text, selections[fields.text])
    optional_columns = [_field_column(batch, name, selections[name]) for name in fields.optional()]
    for index, text in enumerate(texts):
        position = first_row + index
        problem = _parquet_text_problem(text, fields.text, max_record_bytes)
        if problem:
            yield BadRecord(position, None, *problem)
            continue
        optional = [column[index] for column in optional_columns]
        wrong_shape = next((value for value in optional if isinstance(value, _NotAnObject)), None)
        if wrong_shape is not None:
            yield BadRecord(position, None, str(wrong_shape), text[:PREFIX_BYTES].encode("utf-8")[:PREFIX_BYTES])
            continue
        url, date, license_, record_id = (
            None if isinstance(value, _Undecodable) else _optional_str(value) for value in optional
        )
        yield RawRecord(position, None, text, url, date, license_, record_id)


def _is_parquet_data_error(exc: Exception) -> bool:
    """True for Arrow's complaints about the bytes (bad magic, thrift, page data).

    Arrow reports corrupt data as ArrowException subclasses or as a plain
    OSError ("Couldn't deserialize thrift", "Corrupt snappy compressed
    data"), and a column name in the footer that is not UTF-8 as a
    UnicodeDecodeError. Errors of the file object itself re-raise with their
    own type (ConnectionError, TimeoutError, ... are OSError subclasses) and
    are not data errors: they propagate so the runner can retry.
    """
    import pyarrow as pa

    return isinstance(exc, (pa.ArrowException, UnicodeDecodeError)) or type(exc) is OSError


class _Undecodable(NamedTuple):
    """Placeholder for a cell Arrow could not turn into a Python value."""

    error: str


def _column_values(column) -> list:
    """Python values of an Arrow column; a bad cell becomes _Undecodable, not an exception."""
    try:
        return column.to_pylist()
    except Exception:  # e.g. invalid UTF-8 in a string column: find the culprits row by row
        values = []
        for index in range(len(column)):
            try:
                values.append(column[index].as_py())
            except Exception as exc:
                values.append(_Undecodable(f"{type(exc).__name__}: {exc}"))
        return values


def _parquet_text_problem(text: object, name: str, max_record_bytes: int) -> tuple[str, bytes] | None:
    """(error, raw_prefix) if a text cell is unusable, else None."""
    if text is _MISSING:
        return f"missing text field {name!r}", b""
    if isinstance(text, _NotAnObject):
        return str(text), b""
    if text is None:
        return f"text field {name!r} is null", b""
    if isinstance(text, _Undecodable):
        return f"text field {name!r} is not valid text: {text.error}", b""
    if not isinstance(text, str):
        raw = repr(text).encode("utf-8", "replace")[:PREFIX_BYTES]
        return f"text field {name!r} is not a string (got {type(text).__name__})", raw
    if len(text) * 4 > max_record_bytes:  # only then can the UTF-8 form exceed the limit
        size = len(text.encode("utf-8"))
        if size > max_record_bytes:
            error = f"record of {size} bytes exceeds max_record_bytes={max_record_bytes}"
            return error, text[:PREFIX_BYTES].encode("utf-8")[:PREFIX_BYTES]
    return None


def _file_head(fileobj: BinaryIO) -> bytes:
    try:
        fileobj.seek(0)
        return fileobj.read(PREFIX_BYTES)
    except (OSError, ValueError):
        return b""
