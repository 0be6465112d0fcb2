"""Record framing of WARC, WET and ARC files: byte-range splits and damage recovery.

:func:`iter_captures` yields every record that *starts* in one byte range of a
file as a :class:`Capture` (headers, HTTP status and media type, and the
payload when the caller's ``select`` wants it), or a
:class:`~beam_pipeline.sources.readers.BadRecord` for damage, and then goes on at the
next record boundary. WARC records are parsed by FastWARC (``ArchiveIterator``
with HTTP parsing; J. Bevendorff, "FastWARC", ~2x the speed of warcio), ARC
records (which FastWARC does not read) by :func:`_iter_arc`, a small reader of
the ARC v1/v2 header line (``URL IP DATE MIME [...] LENGTH``); WET files are
WARC files whose ``conversion`` records hold plain text.

Offsets (what ``position`` and ``byte_offset`` of a document mean)
------------------------------------------------------------------
``byte_offset`` is where a reader seeks to find the record in the file *as
stored*: the record's first byte in a plain file, the first byte of its gzip
member in a gzipped file (the offset a CDX index holds). A file is gzipped
when it starts with a gzip header, and ARC when its first line is a
``filedesc://`` header, whatever the names (``.warc.gz``, ``.wet.gz``,
``.arc``, ``.arc.gz``, pywb's ``.warc.gz.bad``...). ``position`` is the
same number, plus the record's 0-based index inside its gzip member when one
member holds several records (a whole-file gzip; never the case for
per-record gzip, the standard). Both are independent of how the file was
split, so the output does not depend on parallelism.

Gzip is decoded by the reader itself (``GzipMembers`` of
``web/archive_streams.py``, zlib member by member, FastWARC gets the plain
bytes of one member at a time): only so does the reader know where
every member starts and ends, and whether a member was cut short or does not
decode. FastWARC's own gzip reader ends a file at a truncated member
*silently*, and reads a record on into the next member.

Splits
------
A split ``[start, end)`` owns the records that start in
``[sync(start), sync(end))``, where ``sync(x)`` is the first *record
boundary* at or after ``x``. What a boundary is, and which files are not
split, is said where boundaries are found (``web/archive_streams.py``).

Damage (each is ONE BadRecord; reading resumes at the next boundary)
--------------------------------------------------------------------
* a gzip member that does not decode, bytes between members that are not a
  gzip member, or a member cut off by the end of the file (``corrupt gzip
  member``, ``not a gzip member``, ``truncated gzip member``), at the
  member's offset;
* a record whose header FastWARC cannot parse (``Invalid WARC header``), at the
  end of the record before it; a record without ``WARC-Type``,
  ``WARC-Record-ID``, ``Content-Length`` or a parseable ``WARC-Date``; an HTTP
  header that does not parse; an ARC header line with a bad length or date;
* a record that does not end where it says. Gzipped: a record must end
  inside its gzip member; one cut short in a member its writer still closed
  is a ``truncated record`` (its member ends first) and the next member is
  read intact. Plain: a record must end at its ``Content-Length`` (then only
  line ends, then a ``WARC/`` header or the end of the file): else ``record
  does not end at its Content-Length`` (or ``truncated record`` at the end of
  the file), and reading resumes at the next WARC header after the record's
  start, also one that does not start a line (a record cut mid-line with the
  next one written right after it). A capture is yielded only once what
  follows it has parsed (or its member or file ended cleanly).

Damage inside a gzip member that decodes costs the rest of that member only
(in a whole-file gzip: the rest of the file).

The BadRecord's ``raw_prefix`` holds the first 256 stored bytes at its offset.
I/O errors of the file object propagate, so the runner can retry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import re
from typing import BinaryIO, Callable, Iterator

from fastwarc.warc import ArchiveIterator, HeaderMap, WarcRecordType

from beam_pipeline.records.record_types import BadRecord
from beam_pipeline.web.archive_streams import (
    ARC_LINE,
    HEADER_LIMIT,
    GzipMembers,
    LineReader,
    Placement,
    PlainStream,
    next_boundary,
    raw_at,
    sniff,
)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_REQUIRED = ("WARC-Type", "WARC-Record-ID", "Content-Length", "WARC-Date")
_REQUIRED_KEYS = tuple(name.lower() for name in _REQUIRED)


@dataclasses.dataclass
class Capture:
    """One record of a web archive, before any policy decides about it."""

    kind: str  # WARC-Type lowercased (response, revisit, request, conversion, ...); ARC: response, filedesc
    position: int  # see "Offsets" in the module docstring
    byte_offset: int
    record_id: str | None  # WARC-Record-ID (None for ARC)
    url: str | None  # WARC-Target-URI / ARC URL
    date: str | None  # WARC-Date as written; ARC: its 14-digit date as ISO 8601
    timestamp: int  # date as microseconds since 1970 UTC (orders captures)
    http_status: int | None  # None when the payload is not an HTTP response
    mime: str | None  # media type of the payload, lowercased, without parameters
    charset: str | None  # charset parameter of the HTTP Content-Type
    transfer_encoding: str | None
    content_encoding: str | None
    payload_size: int  # declared bytes of the payload (HTTP body, or whole block)
    digest: str | None  # WARC-Payload-Digest (for a revisit: the original's)
    refers_to_date: int | None = None  # revisit: WARC-Refers-To-Date, microseconds
    payload: bytes | None = None  # read only when select() returned None
    skip: str | None = None  # select()'s reason not to read the payload


Select = Callable[[Capture], "str | None"]


def iter_captures(
    open_binary: Callable[[], BinaryIO],
    *,
    start: int = 0,
    end: int | None = None,
    select: Select = lambda capture: None,
) -> Iterator[Capture | BadRecord]:
    """Every record starting in the split ``[start, end)`` of a file (end None: to its end).

    ``open_binary``: zero-argument callable returning a seekable binary file
    object of the stored bytes (see :func:`beam_pipeline.sources.readers.iter_records`).
    Gzip and ARC are recognized by the first bytes
    (:func:`~beam_pipeline.web.archive_streams.sniff`), not the name.

    ``select(capture)`` sees each capture before its payload is read and
    returns a reason to skip the payload (the capture is still yielded, with
    ``skip`` set and ``payload`` None) or None to read it. The payload of a
    yielded Capture is complete and the record ends where its Content-Length
    says (gzipped: inside its own gzip member); any other record is a
    BadRecord instead.
    """
    with contextlib.closing(open_binary()) as raw:
        gz, arc = sniff(raw)
        lo = 0 if start == 0 else next_boundary(raw, start, gz, arc)
        hi = None if end is None else next_boundary(raw, end, gz, arc)
        reader = _iter_arc if arc else _iter_warc
        pos = lo
        while pos is not None and (hi is None or pos < hi):
            if gz:
                failure = yield from _iter_members(raw, pos, hi, reader, select)
            else:
                failure = yield from reader(PlainStream(raw, pos), hi, select)
            if failure is None or (hi is not None and failure.offset >= hi):
                return
            resume = next_boundary(raw, failure.offset + 1, gz, arc, after_damage=True)
            if failure.error is not None:  # None: already reported as the record it cut short
                skipped = f"{resume - failure.offset} bytes" if resume is not None else "the rest of the file"
                yield BadRecord(
                    failure.position,
                    failure.offset,
                    f"{failure.error}; skipped {skipped} to the next record",
                    raw_at(raw, failure.offset),
                )
            pos = resume


@dataclasses.dataclass(frozen=True)
class _Failure:
    """Where reading a segment stopped; reading resumes at the first boundary after ``offset``."""

    offset: int
    position: int
    error: str | None  # None: a BadRecord standing for it was yielded already


def _iter_members(raw: BinaryIO, start: int, hi: int | None, reader, select: Select):
    """The records of the gzip members from ``start``, each member read on its own.

    A record cannot run on into the next member: one cut short ends with its
    member (``truncated record``) and the next member is read intact. Damage
    inside a member that decodes (a header that does not parse, bytes after a
    record's Content-Length) costs the rest of that member only. Damage of the
    gzip stream itself (a member that does not decode or is cut off by the end
    of the file, bytes that are not a member) is returned: the caller resumes
    at the next boundary.
    """
    members = GzipMembers(raw, start)
    while (offset := members.begin()) is not None:
        if hi is not None and offset >= hi:
            return None
        failure = yield from reader(members, hi, select)
        if members.damage is not None:
            break
        if failure is not None and failure.error is not None:
            yield BadRecord(
                failure.position,
                failure.offset,
                f"{failure.error}; skipped the rest of its gzip member",
                raw_at(raw, failure.offset),
            )
    damage = members.damage
    if damage is None:
        return None
    return _Failure(damage.offset, damage.offset, None if damage.reported else damage.error)


# --------------------------------------------------------------------------
# WARC


def _iter_warc(stream: "PlainStream | GzipMembers", hi: int | None, select: Select):
    """Yield the records of one segment (a plain file from a boundary, or one gzip member).

    Returns None at the segment's clean end, else a :class:`_Failure`. A capture
    is held back until the segment goes on cleanly after it (the next header
    parses, or the segment ends). When FastWARC cannot parse what follows, the
    bytes after the capture's Content-Length decide: not the start of a record
    (after line ends), the capture itself is broken (``record does not end at
    its Content-Length``: a record cut short with the next one's bytes after
    it, or a wrong length); else the header after it is.
    """
    records = ArchiveIterator(
        stream,
        record_types=WarcRecordType.any_type,
        parse_http=False,
        stream_detect=False,
        max_header_len=HEADER_LIMIT,
    )
    placed = Placement()
    held = None  # the last capture, not yet yielded
    last = None  # (item, stream position) of the last record read
    try:
        for record in records:
            offset, position = placed.place(stream.locate(record.stream_pos))
            if held is not None:
                yield held  # a record starts right after it: it ended where it said
                held = None
            if hi is not None and offset >= hi:
                return None
            item = _warc_capture(record, offset, position, select, stream)
            last = (item, record.stream_pos)
            if isinstance(item, Capture):
                held = item
                continue
            yield item
            if stream.damage is not None and stream.damage.reported:
                return _Failure(stream.damage.offset, stream.damage.offset, None)  # the bad record stood for it
            if isinstance(
                stream, PlainStream
            ):  # its framing is not to be trusted: its block may hold the records after it
                return _Failure(offset, position, None)
    except OSError as exc:  # FastWARC: a header it cannot parse
        if stream.damage is None:
            if last is None:
                return _Failure(stream.start, stream.start, f"broken WARC record: {exc}")
            item, stream_pos = last
            if isinstance(item, BadRecord):
                return _Failure(item.byte_offset, item.position, None)  # the broken record before lost the framing
            end = _block_end(stream, stream_pos, item.payload_size)
            after = stream.reread(end, 64)
            if not _starts_record(after):
                yield BadRecord(
                    item.position,
                    item.byte_offset,
                    f"record does not end at its Content-Length ({item.payload_size} bytes): "
                    f"followed by {after[:40]!r}",
                    raw_at(stream.raw, item.byte_offset),
                )
                return _Failure(item.byte_offset, item.position, None)
            yield item
            at = stream.locate(end)
            return _Failure(at, placed.next_position(at), f"broken WARC record: {exc}")
    if held is not None:
        yield held  # the segment ended cleanly after it
    if stream.damage is not None:
        return _Failure(
            stream.damage.offset, stream.damage.offset, None if stream.damage.reported else stream.damage.error
        )
    return None


def _block_end(stream: "PlainStream | GzipMembers", stream_pos: int, declared: int) -> int:
    """Stream position right after the block of the record whose header starts at ``stream_pos``."""
    head = stream.reread(stream_pos, HEADER_LIMIT + 4)
    ends = [(found, len(mark)) for mark in (b"\r\n\r\n", b"\n\n") if (found := head.find(mark)) >= 0]
    if not ends:
        return stream_pos
    found, mark = min(ends)
    return stream_pos + found + mark + declared


def _starts_record(data: bytes) -> bool:
    """Whether ``data`` (what follows a record's block) is only line ends, then a WARC header or the end."""
    rest = data.lstrip(b"\r\n")
    return not rest or rest.startswith(b"WARC/")


def _warc_capture(record, offset: int, position: int, select: Select, stream) -> Capture | BadRecord:
    headers = {}  # lowercased names, the first of repeated names wins (one pass: HeaderMap.get scans)
    for name, value in record.headers.items():
        headers.setdefault(name.lower(), value)
    missing = [name for name, key in zip(_REQUIRED, _REQUIRED_KEYS) if not headers.get(key)]
    declared = (headers.get("content-length") or "").strip()
    if missing or not declared.isdigit():
        problem = f"no {', '.join(missing)}" if missing else f"Content-Length {declared!r}"
        return _bad_record(record, offset, position, stream, f"broken WARC header: {problem}")
    timestamp = _warc_timestamp(headers.get("warc-date"))
    if timestamp is None:
        return _bad_record(
            record, offset, position, stream, f"broken WARC header: WARC-Date {headers.get('warc-date')!r}"
        )
    kind = headers.get("warc-type").strip().lower()
    block_type = (headers.get("content-type") or "").lower()
    status = charset = transfer = encoding = None
    mime = _media_type(headers.get("content-type"))
    if kind in ("response", "revisit") and block_type.startswith("application/http") and record.content_length:
        try:
            record.parse_http(auto_decode="none", max_header_len=HEADER_LIMIT)
        except Exception as exc:  # FastWARC raises OSError/ValueError on a broken status line or header
            return _bad_record(record, offset, position, stream, f"broken HTTP header: {exc}")
        http = record.http_headers
        if http is None:  # FastWARC parses no HTTP message under a Content-Type it does not take for one
            return _bad_record(
                record, offset, position, stream, f"broken WARC header: Content-Type {headers.get('content-type')!r}"
            )
        status = http.status_code
        if status is None:
            return _bad_record(
                record, offset, position, stream, f"broken HTTP header: status line {http.status_line!r}"
            )
        mime = _media_type(http.get("Content-Type"))
        charset = record.http_charset
        transfer = http.get("Transfer-Encoding")
        encoding = http.get("Content-Encoding")
    capture = Capture(
        kind=kind,
        position=position,
        byte_offset=offset,
        record_id=headers.get("warc-record-id"),
        url=_target_uri(headers.get("warc-target-uri")),
        date=headers.get("warc-date"),
        timestamp=timestamp,
        http_status=status,
        mime=mime,
        charset=charset,
        transfer_encoding=transfer,
        content_encoding=encoding,
        payload_size=record.content_length,
        digest=headers.get("warc-payload-digest"),
        refers_to_date=_warc_timestamp(headers.get("warc-refers-to-date")),
    )
    capture.skip = select(capture)
    if capture.skip is not None:
        got = record.consume()
    else:
        capture.payload = record.reader.read()
        got = len(capture.payload)
    if got < capture.payload_size:
        return _truncated(stream, offset, position, got, capture.payload_size)
    return capture


def _bad_record(record, offset: int, position: int, stream, error: str) -> BadRecord:
    try:
        record.consume()
    except OSError:
        pass
    return _damaged(stream, offset, position, error)


def _truncated(stream, offset: int, position: int, got: int, declared: int) -> BadRecord:
    where = " (its gzip member ends first)" if isinstance(stream, GzipMembers) and stream.damage is None else ""
    return _damaged(stream, offset, position, f"truncated record: {got} of {declared} payload bytes{where}")


def _damaged(stream, offset: int, position: int, error: str) -> BadRecord:
    """A BadRecord for one record; it also stands for damage of the stream at the same offset."""
    if stream.damage is not None and stream.damage.offset == offset:
        error = f"{stream.damage.error}: {error}"
        stream.damage.reported = True
    return BadRecord(position, offset, error, raw_at(stream.raw, offset))


def _warc_timestamp(value: str | None) -> int | None:
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return (moment - _EPOCH) // datetime.timedelta(microseconds=1)


def _target_uri(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value[1:-1] if value.startswith("<") and value.endswith(">") else value  # WARC/1.0 drafts wrote <uri>


def _media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


# --------------------------------------------------------------------------
# ARC (v1 and v2 header lines: URL IP-address Archive-date Content-type [...] Archive-length)


def _iter_arc(stream: "PlainStream | GzipMembers", hi: int | None, select: Select):
    lines = LineReader(stream)
    placed = Placement()
    while True:
        start = lines.tell()
        line = lines.readline(HEADER_LIMIT)
        if not line:
            break
        if not line.strip() or not ARC_LINE.match(line):
            continue  # blank separator, or the rest of a record whose header was bad
        offset, position = placed.place(stream.locate(start))
        if hi is not None and offset >= hi:
            return None
        yield _arc_capture(line, offset, position, lines, select, stream)
        if stream.damage is not None and stream.damage.reported:
            return _Failure(stream.damage.offset, stream.damage.offset, None)
    if stream.damage is not None:
        return _Failure(stream.damage.offset, stream.damage.offset, stream.damage.error)
    return None


def _arc_capture(
    line: bytes, offset: int, position: int, lines: "LineReader", select: Select, stream
) -> Capture | BadRecord:
    fields = line.rstrip(b"\r\n").split(b" ")
    date, length = fields[2], fields[-1]
    if len(fields) not in (5, 10) or not length.isdigit() or len(date) != 14 or not date.isdigit():
        return BadRecord(position, offset, f"broken ARC header: {line[:200]!r}", raw_at(stream.raw, offset))
    url = fields[0].decode("utf-8", "replace")
    moment = datetime.datetime.strptime(date.decode(), "%Y%m%d%H%M%S").replace(tzinfo=datetime.UTC)
    block_size = int(length)
    head = lines.read(min(block_size, HEADER_LIMIT))
    kind = "filedesc" if url.startswith("filedesc:") else "response"
    status = charset = transfer = encoding = None
    mime = _media_type(fields[3].decode("ascii", "replace"))
    consumed = 0
    if kind == "response" and head.startswith(b"HTTP/") and len(head) == min(block_size, HEADER_LIMIT):
        http = HeaderMap()
        try:
            if b"\r\n\r\n" not in head and b"\n\n" not in head:
                raise ValueError(f"no end of the header in its first {len(head)} bytes")
            consumed = http.parse(io.BytesIO(head))
        except Exception as exc:
            lines.skip(block_size - len(head))
            return BadRecord(position, offset, f"broken HTTP header: {exc}", raw_at(stream.raw, offset))
        status = http.status_code
        mime = _media_type(http.get("Content-Type")) or mime
        charset = _charset_param(http.get("Content-Type"))
        transfer, encoding = http.get("Transfer-Encoding"), http.get("Content-Encoding")
    capture = Capture(
        kind=kind,
        position=position,
        byte_offset=offset,
        record_id=None,
        url=url,
        date=moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        timestamp=(moment - _EPOCH) // datetime.timedelta(microseconds=1),
        http_status=status,
        mime=mime,
        charset=charset,
        transfer_encoding=transfer,
        content_encoding=encoding,
        payload_size=block_size - consumed,
        digest=None,
    )
    capture.skip = select(capture)
    if capture.skip is not None:
        got = len(head) + lines.skip(block_size - len(head))
    else:
        capture.payload = head[consumed:] + lines.read(block_size - len(head))
        got = consumed + len(capture.payload)
    if got < block_size:
        return _truncated(stream, offset, position, got, block_size)
    return capture


def _charset_param(content_type: str | None) -> str | None:
    match = re.search(r"charset\s*=\s*[\"']?([^\s;\"']+)", content_type or "", re.IGNORECASE)
    return match.group(1) if match else None
