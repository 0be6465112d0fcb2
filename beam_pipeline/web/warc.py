"""Record framing of WARC, WET and ARC files: byte-range splits and damage recovery.

:func:`iter_captures` yields every record that *starts* in one byte range of a
file as a :class:`Capture` (headers, HTTP status and media type, and the
payload when the caller's ``select`` wants it), or a
:class:`~beam_pipeline.readers.BadRecord` for damage, and then goes on at the
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

Gzip is decoded here (``_GzipMembers``, zlib member by member, FastWARC gets
the plain bytes): only so does the reader know where every member starts, and
whether a member was cut short or does not decode. FastWARC's own gzip
reader ends a file at a truncated member *silently*.

Splits
------
A split ``[start, end)`` owns the records that start in
``[sync(start), sync(end))``, where ``sync(x)`` is the first *record
boundary* at or after ``x``:

* gzip: a gzip member start (bytes ``1f 8b 08``) whose first decompressed
  bytes are ``WARC/1.`` (an ARC header line in a gzipped ARC file); a false match
  would need those three bytes at a random place *and* a deflate stream that
  decodes to a record header;
* plain WARC: a line ``WARC/1.0`` or ``WARC/1.1`` whose header block ends
  with an empty line within 64 KiB and has ``WARC-Type``, ``WARC-Record-ID``
  and ``Content-Length``. A payload that *embeds* such a record (an archived
  WARC file served over HTTP) can fool the scan when a split starts inside it;
  split plain WARC files only if that cannot happen, or compress them;
* plain ARC files are never split (``plan_splits`` gives one range).

Both neighbours compute the same ``sync(end)``, so every record and every
damaged region belongs to exactly one split. A whole-file gzip (one member)
has no boundary after 0: the first split reads it all, the others nothing.

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
* a record whose block is shorter than its ``Content-Length`` (a truncated
  file): ``truncated record``.

The BadRecord's ``raw_prefix`` holds the first 256 stored bytes at its offset.
I/O errors of the file object propagate, so the runner can retry.
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime
import io
import re
import zlib
from typing import BinaryIO, Callable, Iterator

from fastwarc.warc import ArchiveIterator, HeaderMap, WarcRecordType

from beam_pipeline.readers import BadRecord

GZIP_MAGIC = b"\x1f\x8b\x08"
_PREFIX_BYTES = 256
_READ = 1 << 16  # decompressed bytes per read() handed to FastWARC
_SCAN = 1 << 20  # raw bytes per step of a boundary scan
_HEADER_LIMIT = 1 << 16  # a WARC or HTTP header block larger than this is broken
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_ARC_LINE = re.compile(rb"^(?:filedesc|[a-zA-Z][a-zA-Z0-9+.-]*):\S* \S+ \S+ \S+ ")
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


def sniff(raw: BinaryIO) -> tuple[bool, bool]:
    """(gzip, arc) of a file from its first bytes, whatever its name; the position is restored."""
    here = raw.tell()
    raw.seek(0)
    head = raw.read(_HEADER_LIMIT)
    raw.seek(here)
    gz = head.startswith(GZIP_MAGIC)
    if gz:
        head = _inflate_head(head) or b""
    return gz, head.startswith(b"filedesc:")


def plan_splits(size: int, split_bytes: int, *, gz: bool, arc: bool) -> list[tuple[int, int | None]]:
    """Byte ranges ``[start, end)`` of a file of ``size`` bytes; the last ends at None (EOF)."""
    if split_bytes <= 0:
        raise ValueError(f"split_bytes must be positive, got {split_bytes}")
    if size <= split_bytes or (arc and not gz):
        return [(0, None)]
    starts = list(range(0, size, split_bytes))
    return [(start, starts[i + 1] if i + 1 < len(starts) else None) for i, start in enumerate(starts)]


def iter_captures(open_binary: Callable[[], BinaryIO], *, start: int = 0, end: int | None = None,
                  select: Select = lambda capture: None) -> Iterator[Capture | BadRecord]:
    """Every record starting in the split ``[start, end)`` of a file (end None: to its end).

    ``open_binary``: zero-argument callable returning a seekable binary file
    object of the stored bytes (see :func:`beam_pipeline.readers.iter_records`).
    Gzip and ARC are recognized by the first bytes (:func:`sniff`), not the name.

    ``select(capture)`` sees each capture before its payload is read and
    returns a reason to skip the payload (the capture is still yielded, with
    ``skip`` set and ``payload`` None) or None to read it. The payload of a
    yielded Capture is complete: a short one is a BadRecord instead.
    """
    with contextlib.closing(open_binary()) as raw:
        gz, arc = sniff(raw)
        lo = 0 if start == 0 else _sync(raw, start, gz, arc)
        hi = None if end is None else _sync(raw, end, gz, arc)
        pos = lo
        while pos is not None and (hi is None or pos < hi):
            stream = _GzipMembers(raw, pos) if gz else _Plain(raw, pos)
            reader = _iter_arc if arc else _iter_warc
            failure = yield from reader(stream, hi, select)
            if failure is None:
                return
            at, error = failure
            if hi is not None and at >= hi:
                return
            resume = _sync(raw, at + 1, gz, arc)
            if error is not None:  # None: the damage was already reported as the record it cut short
                skipped = f"{resume - at} bytes" if resume is not None else "the rest of the file"
                yield BadRecord(at, at, f"{error}; skipped {skipped} to the next record", _raw_at(raw, at))
            pos = resume


# --------------------------------------------------------------------------
# WARC


def _iter_warc(stream: "_Plain | _GzipMembers", hi: int | None, select: Select):
    """Yield the captures of a stream; return None at a clean end, else (offset, error) of the damage."""
    records = ArchiveIterator(stream, record_types=WarcRecordType.any_type, parse_http=False,
                              stream_detect=False, max_header_len=_HEADER_LIMIT)
    placed = _Placement()
    last = None  # (stream position, byte_offset, declared block length) of the last record
    item = None
    try:
        for record in records:
            offset, position = placed.place(stream.locate(record.stream_pos))
            if hi is not None and offset >= hi:
                return None
            last = (record.stream_pos, offset, record.content_length)
            item = _warc_capture(record, offset, position, select, stream)
            yield item
            if stream.damage is not None and stream.damage.reported:
                return stream.damage.offset, None  # the bad record stood for the damage; resume after it
    except OSError as exc:  # FastWARC: a header it cannot parse
        if stream.damage is None and isinstance(item, BadRecord):
            return item.byte_offset, None  # the broken record before lost the framing: one damage, reported
        if stream.damage is None:
            return _after(stream, last), f"broken WARC record: {exc}"
    if stream.damage is not None:
        return stream.damage.offset, stream.damage.error
    return None


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
        return _bad_record(record, offset, position, stream,
                           f"broken WARC header: WARC-Date {headers.get('warc-date')!r}")
    kind = headers.get("warc-type").strip().lower()
    block_type = (headers.get("content-type") or "").lower()
    status = charset = transfer = encoding = None
    mime = _media_type(headers.get("content-type"))
    if kind in ("response", "revisit") and block_type.startswith("application/http") and record.content_length:
        try:
            record.parse_http(auto_decode="none", max_header_len=_HEADER_LIMIT)
        except Exception as exc:  # FastWARC raises OSError/ValueError on a broken status line or header
            return _bad_record(record, offset, position, stream, f"broken HTTP header: {exc}")
        http = record.http_headers
        status = http.status_code
        if status is None:
            return _bad_record(record, offset, position, stream,
                               f"broken HTTP header: status line {http.status_line!r}")
        mime = _media_type(http.get("Content-Type"))
        charset = record.http_charset
        transfer = http.get("Transfer-Encoding")
        encoding = http.get("Content-Encoding")
    capture = Capture(
        kind=kind, position=position, byte_offset=offset, record_id=headers.get("warc-record-id"),
        url=_target_uri(headers.get("warc-target-uri")), date=headers.get("warc-date"), timestamp=timestamp,
        http_status=status, mime=mime, charset=charset, transfer_encoding=transfer, content_encoding=encoding,
        payload_size=record.content_length, digest=headers.get("warc-payload-digest"),
        refers_to_date=_warc_timestamp(headers.get("warc-refers-to-date")))
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
    return _damaged(stream, offset, position, f"truncated record: {got} of {declared} payload bytes")


def _damaged(stream, offset: int, position: int, error: str) -> BadRecord:
    """A BadRecord for one record; it also stands for damage of the stream at the same offset."""
    if stream.damage is not None and stream.damage.offset == offset:
        error = f"{stream.damage.error}: {error}"
        stream.damage.reported = True
    return BadRecord(position, offset, error, _raw_at(stream.raw, offset))


def _after(stream, last) -> int:
    """Stored offset where the record after ``last`` (the last good one) starts."""
    if last is None:
        return stream.start
    stream_pos, offset, declared = last
    if isinstance(stream, _GzipMembers):
        return stream.next_member_after(stream_pos, default=offset)
    raw = stream.raw  # plain: the record's header length is needed, so read it again
    raw.seek(offset)
    head = raw.read(_HEADER_LIMIT + 4)
    end = head.find(b"\r\n\r\n")
    return offset + end + 4 + declared if end >= 0 else offset


def _warc_timestamp(value: str | None) -> int | None:
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
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


def _iter_arc(stream: "_Plain | _GzipMembers", hi: int | None, select: Select):
    lines = _LineReader(stream)
    placed = _Placement()
    while True:
        start = lines.tell()
        line = lines.readline(_HEADER_LIMIT)
        if not line:
            break
        if not line.strip() or not _ARC_LINE.match(line):
            continue  # blank separator, or the rest of a record whose header was bad
        offset, position = placed.place(stream.locate(start))
        if hi is not None and offset >= hi:
            return None
        yield _arc_capture(line, offset, position, lines, select, stream)
        if stream.damage is not None and stream.damage.reported:
            return stream.damage.offset, None
    if stream.damage is not None:
        return stream.damage.offset, stream.damage.error
    return None


def _arc_capture(line: bytes, offset: int, position: int, lines: "_LineReader", select: Select,
                 stream) -> Capture | BadRecord:
    fields = line.rstrip(b"\r\n").split(b" ")
    date, length = fields[2], fields[-1]
    if len(fields) not in (5, 10) or not length.isdigit() or len(date) != 14 or not date.isdigit():
        return BadRecord(position, offset, f"broken ARC header: {line[:200]!r}", _raw_at(stream.raw, offset))
    url = fields[0].decode("utf-8", "replace")
    moment = datetime.datetime.strptime(date.decode(), "%Y%m%d%H%M%S").replace(tzinfo=datetime.timezone.utc)
    block_size = int(length)
    head = lines.read(min(block_size, _HEADER_LIMIT))
    kind = "filedesc" if url.startswith("filedesc:") else "response"
    status = charset = transfer = encoding = None
    mime = _media_type(fields[3].decode("ascii", "replace"))
    consumed = 0
    if kind == "response" and head.startswith(b"HTTP/") and len(head) == min(block_size, _HEADER_LIMIT):
        http = HeaderMap()
        try:
            if b"\r\n\r\n" not in head and b"\n\n" not in head:
                raise ValueError(f"no end of the header in its first {len(head)} bytes")
            consumed = http.parse(io.BytesIO(head))
        except Exception as exc:
            lines.skip(block_size - len(head))
            return BadRecord(position, offset, f"broken HTTP header: {exc}", _raw_at(stream.raw, offset))
        status = http.status_code
        mime = _media_type(http.get("Content-Type")) or mime
        charset = _charset_param(http.get("Content-Type"))
        transfer, encoding = http.get("Transfer-Encoding"), http.get("Content-Encoding")
    capture = Capture(
        kind=kind, position=position, byte_offset=offset, record_id=None, url=url,
        date=moment.strftime("%Y-%m-%dT%H:%M:%SZ"), timestamp=(moment - _EPOCH) // datetime.timedelta(microseconds=1),
        http_status=status, mime=mime, charset=charset, transfer_encoding=transfer, content_encoding=encoding,
        payload_size=block_size - consumed, digest=None)
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


class _LineReader:
    """Lines and blocks of a stream, with their offsets in the (decompressed) stream."""

    def __init__(self, stream):
        self._stream = stream
        self._buffer = b""
        self._offset = stream.tell()  # stream offset of _buffer[0]

    def tell(self) -> int:
        return self._offset

    def _fill(self) -> bool:
        chunk = self._stream.read(_READ)
        self._buffer += chunk
        return bool(chunk)

    def readline(self, limit: int) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0 and len(self._buffer) < limit and self._fill():
            pass
        end = len(self._buffer) if end < 0 else end + 1
        return self._take(min(end, limit))

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and self._fill():
            pass
        return self._take(size)

    def skip(self, size: int) -> int:
        """Discard up to ``size`` bytes without holding them; the number discarded."""
        done = 0
        while done < size:
            if not self._buffer and not self._fill():
                break
            done += len(self._take(min(size - done, len(self._buffer))))
        return done

    def _take(self, size: int) -> bytes:
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        self._offset += len(out)
        return out


# --------------------------------------------------------------------------
# Streams handed to the record parsers: offsets, gzip members, damage


class _Damage:
    def __init__(self, offset: int, error: str):
        self.offset, self.error, self.reported = offset, error, False


class _Placement:
    """(byte_offset, position) of consecutive records from their stored offsets."""

    def __init__(self):
        self._offset, self._index = None, 0

    def place(self, offset: int) -> tuple[int, int]:
        self._index = self._index + 1 if offset == self._offset else 0
        self._offset = offset
        return offset, offset + self._index


class _Plain:
    """A plain file from ``start``; stream positions are file offsets."""

    damage = None

    def __init__(self, raw: BinaryIO, start: int):
        raw.seek(start)
        self.raw, self.start, self._position = raw, start, start

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def locate(self, stream_position: int) -> int:
        return stream_position

    def close(self) -> None:
        pass


class _GzipMembers:
    """The decompressed bytes of the gzip members from ``start``, member by member.

    Stream positions count decompressed bytes from 0; :meth:`locate` maps one
    to the stored offset of its member. On damage it sets ``damage`` and
    reports end of file, so FastWARC finishes the records before the damage
    cleanly and the caller resumes at the next boundary.
    """

    def __init__(self, raw: BinaryIO, start: int):
        raw.seek(start)
        self.raw, self.start = raw, start
        self.damage: _Damage | None = None
        self._pending = b""  # raw bytes read, not yet decompressed
        self._pending_offset = start  # stored offset of _pending[0]
        self._member = None  # decompressobj of the member being read
        self._member_offset = start
        self._out = 0  # decompressed bytes handed out
        self._starts: list[int] = []  # decompressed position of each member's start
        self._offsets: list[int] = []  # stored offset of each member

    def tell(self) -> int:
        return self._out

    def close(self) -> None:
        pass

    def locate(self, stream_position: int) -> int:
        index = bisect.bisect_right(self._starts, stream_position) - 1
        return self._offsets[max(index, 0)] if self._offsets else self.start

    def next_member_after(self, stream_position: int, default: int) -> int:
        index = bisect.bisect_right(self._starts, stream_position)
        return self._offsets[index] if index < len(self._offsets) else (
            self._member_offset if self._member_offset > default else default)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes, across member boundaries; b"" at the end or after damage."""
        size = _READ if size is None or size < 0 else size
        parts, got = [], 0
        while got < size and self.damage is None:
            if not self._pending:
                self._pending = self.raw.read(_READ)
                if not self._pending:
                    tail = self._end_of_file()
                    parts.append(tail)
                    got += len(tail)
                    break
            if self._member is None and not self._start_member():
                continue
            data = self._pending
            try:
                out = self._member.decompress(data, size - got)
            except zlib.error as exc:
                self.damage = _Damage(self._member_offset, f"corrupt gzip member: {exc}")
                break
            rest = self._member.unused_data if self._member.eof else self._member.unconsumed_tail
            self._pending_offset += len(data) - len(rest)
            self._pending = rest
            if self._member.eof:
                self._member = None
            if out:
                parts.append(out)
                got += len(out)
                self._out += len(out)
        return b"".join(parts)

    def _start_member(self) -> bool:
        """Begin the member at the head of _pending; False if more input is needed first."""
        stripped = self._pending.lstrip(b"\0")  # zero padding between members is allowed (as gzip does)
        self._pending_offset += len(self._pending) - len(stripped)
        self._pending = stripped
        if len(stripped) < len(GZIP_MAGIC):
            more = self.raw.read(_READ)
            if more:
                self._pending += more
                return False
            if not stripped:
                return False  # clean end of file; the next read() reports it
        if not self._pending.startswith(GZIP_MAGIC):
            self.damage = _Damage(self._pending_offset, "not a gzip member")
            return False
        self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._member_offset = self._pending_offset
        self._starts.append(self._out)
        self._offsets.append(self._pending_offset)
        return True

    def _end_of_file(self) -> bytes:
        if self._member is None:
            return b""
        tail = self._member.flush()  # the file ends inside a member
        self.damage = _Damage(self._member_offset, "truncated gzip member")
        self._member = None
        self._out += len(tail)
        return tail


# --------------------------------------------------------------------------
# Record boundaries


def _sync(raw: BinaryIO, start: int, gz: bool, arc: bool) -> int | None:
    """Stored offset of the first record boundary at or after ``start``; None at end of file."""
    marker = GZIP_MAGIC if gz else (b"\n" if arc else b"WARC/1.")
    offset = start
    while True:
        raw.seek(offset)
        chunk = raw.read(_SCAN)
        if not chunk:
            return None
        found = chunk.find(marker)
        while found >= 0:
            candidate = offset + found + (1 if marker == b"\n" else 0)
            if _is_boundary(raw, candidate, gz, arc):
                return candidate
            found = chunk.find(marker, found + 1)
        if len(chunk) < _SCAN:
            return None
        offset += len(chunk) - len(marker) + 1


def _is_boundary(raw: BinaryIO, offset: int, gz: bool, arc: bool) -> bool:
    raw.seek(max(offset - 1, 0))
    data = raw.read(_HEADER_LIMIT + 1)
    before, data = (data[:1], data[1:]) if offset else (b"\n", data)
    if gz:
        head = _inflate_head(data)
        return head is not None and (bool(_ARC_LINE.match(head)) if arc else head.startswith(b"WARC/1."))
    if arc:
        return bool(_ARC_LINE.match(data))
    end = data.find(b"\r\n\r\n")
    if before != b"\n" or end < 0 or not data.startswith((b"WARC/1.0\r\n", b"WARC/1.1\r\n")):
        return False
    header = data[:end].lower()
    return all(name in header for name in (b"\nwarc-type:", b"\nwarc-record-id:", b"\ncontent-length:"))


def _inflate_head(data: bytes) -> bytes | None:
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 64)
    except zlib.error:
        return None


def _raw_at(raw: BinaryIO, offset: int) -> bytes:
    """The first stored bytes at ``offset``; the file position is restored (a parser may be reading)."""
    here = raw.tell()
    raw.seek(offset)
    data = raw.read(_PREFIX_BYTES)
    raw.seek(here)
    return data
