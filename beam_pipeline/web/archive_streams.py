"""The byte layer of web archive files, under ``web/warc.py``: file kind, splits, boundaries and streams.

:func:`sniff` tells a gzipped file and an ARC file by their first bytes,
whatever their names. :func:`plan_splits` cuts a file into byte ranges (the
ingest stage's splits, ``transforms/web_archives.py``), and ``next_boundary`` finds the
first record boundary at or after an offset, so that each split of
:func:`~beam_pipeline.web.warc.iter_captures` reads the records that start in
it. The record parsers of ``web/warc.py`` read ``PlainStream`` (a plain file from a
boundary) or ``GzipMembers`` (one gzip member at a time, decoded with zlib so
the reader knows where every member starts and ends and whether it was cut
short or does not decode), both of which give the stored offset of a record,
and ARC header lines through ``LineReader``; ``raw_at`` keeps the first
stored bytes of a damaged record for its BadRecord.

Record boundaries
-----------------
A split ``[start, end)`` owns the records that start in
``[sync(start), sync(end))`` (``web/warc.py``, "Splits"), where ``sync(x)``
(``next_boundary``) is the first *record boundary* at or after ``x``:

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
"""

from __future__ import annotations

import re
import zlib
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b\x08"
_PREFIX_BYTES = 256
_READ = 1 << 16  # decompressed bytes per read() handed to FastWARC
_SCAN = 1 << 20  # raw bytes per step of a boundary scan
HEADER_LIMIT = 1 << 16  # a WARC or HTTP header block larger than this is broken
ARC_LINE = re.compile(rb"^(?:filedesc|[a-zA-Z][a-zA-Z0-9+.-]*):\S* \S+ \S+ \S+ ")


def sniff(raw: BinaryIO) -> tuple[bool, bool]:
    """(gzip, arc) of a file from its first bytes, whatever its name; the position is restored."""
    here = raw.tell()
    raw.seek(0)
    head = raw.read(HEADER_LIMIT)
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


# --------------------------------------------------------------------------
# Streams handed to the record parsers: offsets, gzip members, damage


class _Damage:
    def __init__(self, offset: int, error: str):
        self.offset, self.error, self.reported = offset, error, False


class Placement:
    """(byte_offset, position) of consecutive records from their stored offsets."""

    def __init__(self):
        self._offset, self._index = None, 0

    def place(self, offset: int) -> tuple[int, int]:
        self._index = self._index + 1 if offset == self._offset else 0
        self._offset = offset
        return offset, offset + self._index

    def next_position(self, offset: int) -> int:
        """The position a record at ``offset`` would get next (without placing it)."""
        return offset + (self._index + 1 if offset == self._offset else 0)


class PlainStream:
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

    def reread(self, stream_position: int, size: int) -> bytes:
        """``size`` bytes at a stream position already read (the reading position is kept)."""
        here = self.raw.tell()
        self.raw.seek(stream_position)
        data = self.raw.read(size)
        self.raw.seek(here)
        return data

    def close(self) -> None:
        pass


class GzipMembers:
    """The gzip members of a file from ``start``, one member at a time.

    :meth:`begin` starts the next member and returns its stored offset (None at
    the end of the file or at damage); :meth:`read` hands out the decompressed
    bytes of that member only and b"" at its end, so a parser cannot run on
    into the next member. Stream positions count decompressed bytes from the
    member's start; :meth:`locate` gives the member's stored offset. On damage
    (a member that does not decode, is cut off by the end of the file, or
    bytes that are not a member) it sets ``damage`` and reads as the end.
    """

    def __init__(self, raw: BinaryIO, start: int):
        raw.seek(start)
        self.raw = raw
        self.damage: _Damage | None = None
        self.start = start  # stored offset of the current member
        self._pending = b""  # raw bytes read, not yet decompressed
        self._pending_offset = start  # stored offset of _pending[0]
        self._member = None  # decompressobj of the member being read; None at its end
        self._out = 0  # decompressed bytes of the current member handed out

    def tell(self) -> int:
        return self._out

    def close(self) -> None:
        pass

    def locate(self, stream_position: int) -> int:
        return self.start

    def begin(self) -> int | None:
        """Start the next member (the rest of the current one is skipped); its stored offset, or None."""
        while self._member is not None and self.damage is None:
            self.read(_READ)
        if self.damage is not None:
            return None
        while len(stripped := self._pending.lstrip(b"\0")) < len(GZIP_MAGIC):  # zero padding is allowed (gzip)
            more = self.raw.read(_READ)
            if not more:
                break
            self._pending += more
        self._pending_offset += len(self._pending) - len(stripped)
        self._pending = stripped
        if not stripped:
            return None  # clean end of the file
        if not stripped.startswith(GZIP_MAGIC):
            self.damage = _Damage(self._pending_offset, "not a gzip member")
            return None
        self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.start, self._out = self._pending_offset, 0
        return self.start

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes of the current member; b"" at its end or after damage."""
        size = _READ if size is None or size < 0 else size
        parts, got = [], 0
        while got < size and self._member is not None and self.damage is None:
            if not self._pending:
                self._pending = self.raw.read(_READ)
                if not self._pending:  # the file ends inside the member
                    tail = self._member.flush()
                    self.damage = _Damage(self.start, "truncated gzip member")
                    self._member = None
                    parts.append(tail)
                    got += len(tail)
                    break
            data = self._pending
            try:
                out = self._member.decompress(data, size - got)
            except zlib.error as exc:
                self.damage = _Damage(self.start, f"corrupt gzip member: {exc}")
                self._member = None
                break
            ended = self._member.eof
            rest = self._member.unused_data if ended else self._member.unconsumed_tail
            self._pending_offset += len(data) - len(rest)
            self._pending = rest
            if ended:
                self._member = None
            parts.append(out)
            got += len(out)
        self._out += got
        return b"".join(parts)

    def reread(self, stream_position: int, size: int) -> bytes:
        """``size`` decompressed bytes at a position of the current member, decoded again from its start.

        Only the damage paths call it; the reading position is kept.
        """
        here = self.raw.tell()
        self.raw.seek(self.start)
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        parts, skip, need = [], stream_position, size
        pending = b""
        try:
            while need > 0 and not inflater.eof:
                if not pending:
                    pending = self.raw.read(_READ)
                    if not pending:
                        break
                out = inflater.decompress(pending, _READ)
                pending = inflater.unconsumed_tail
                if skip >= len(out):
                    skip -= len(out)
                    continue
                piece = out[skip : skip + need]
                skip = 0
                parts.append(piece)
                need -= len(piece)
        except zlib.error:
            pass
        self.raw.seek(here)
        return b"".join(parts)


# --------------------------------------------------------------------------
# Lines of a stream (ARC header lines)


class LineReader:
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
# Record boundaries


def next_boundary(raw: BinaryIO, start: int, gz: bool, arc: bool, *, after_damage: bool = False) -> int | None:
    """Stored offset of the first record boundary at or after ``start``; None at end of file.

    ``after_damage``: resuming after a record that did not end where it said,
    a plain WARC header also counts where it does not start a line (a record
    cut short mid-line, the next one written right after it). Split points
    keep the stricter rule; both neighbours of a split point compute it alike.
    """
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
            if _is_boundary(raw, candidate, gz, arc, line_start=not after_damage):
                return candidate
            found = chunk.find(marker, found + 1)
        if len(chunk) < _SCAN:
            return None
        offset += len(chunk) - len(marker) + 1


def _is_boundary(raw: BinaryIO, offset: int, gz: bool, arc: bool, *, line_start: bool = True) -> bool:
    raw.seek(max(offset - 1, 0))
    data = raw.read(HEADER_LIMIT + 1)
    before, data = (data[:1], data[1:]) if offset else (b"\n", data)
    if gz:
        head = _inflate_head(data)
        return head is not None and (bool(ARC_LINE.match(head)) if arc else head.startswith(b"WARC/1."))
    if arc:
        return bool(ARC_LINE.match(data))
    end = data.find(b"\r\n\r\n")
    if (line_start and before != b"\n") or end < 0 or not data.startswith((b"WARC/1.0\r\n", b"WARC/1.1\r\n")):
        return False
    header = data[:end].lower()
    return all(name in header for name in (b"\nwarc-type:", b"\nwarc-record-id:", b"\ncontent-length:"))


def _inflate_head(data: bytes) -> bytes | None:
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, 64)
    except zlib.error:
        return None


def raw_at(raw: BinaryIO, offset: int) -> bytes:
    """The first stored bytes at ``offset``; the file position is restored (a parser may be reading)."""
    here = raw.tell()
    raw.seek(offset)
    data = raw.read(_PREFIX_BYTES)
    raw.seek(here)
    return data
