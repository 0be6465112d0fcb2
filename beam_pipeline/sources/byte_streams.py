"""Decompressed byte streams of an input file, and their split into lines that are never held oversized.

The file readers of ``sources/readers.py`` (:func:`~beam_pipeline.sources.readers.iter_records`)
read every ``jsonl`` and ``text`` file through :func:`decompressed_chunks`,
and ``jsonl`` lines through :func:`split_lines`; the contract (codecs by
suffix, what a damaged stream yields) is that module's "Compression" section
and its dead-letter rules.

Decompression streams in ``chunk_size`` pieces: gzip with
``zlib.decompressobj(16 + MAX_WBITS)`` and ``max_length`` (output per call is
bounded), continuing with ``unused_data`` across concatenated members (zero
padding between members is ignored, as the gzip module does); zstd with
``ZstdDecompressor().decompressobj()``, one per frame, across any number of
frames, fed input slices sized from the compression ratio seen so far so that
each call yields about ``chunk_size`` bytes (its output cannot be capped). A
stream that ends inside a member/frame or fails to decode raises
``DamagedStream`` after yielding all it could recover. A line longer than
``max_record_bytes`` keeps only its first 256 bytes and its true size.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO, Iterator, NamedTuple

import zstandard

from beam_pipeline.records.record_types import BadRecord

PREFIX_BYTES = 256  # how much of a bad record we keep in BadRecord.raw_prefix
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer, 32 KiB window
# Bounds of the compressed input fed to one zstd decompress() call, whose
# output cannot be capped (see _next_zstd_slice). 64 bytes hold at most 16
# run-length blocks (2 MiB of output); 16 KiB of ordinary text yields ~100 KiB.
# A crafted stream that jumps from a low to an extreme ratio inside one slice
# could still force up to ~512 MiB out of a single call.
_ZSTD_MIN_SLICE = 64
_ZSTD_MAX_SLICE = 16 << 10


# --------------------------------------------------------------------------
# Decompression: every source yields decompressed chunks, then either returns
# (clean end) or raises DamagedStream after yielding all it could recover.


class DamagedStream(Exception):
    """A compressed stream ended early ("truncated") or failed to decode ("corrupt")."""

    def __init__(self, codec: str, damage: str, detail: str = ""):
        super().__init__(codec, damage, detail)
        self.codec, self.damage, self.detail = codec, damage, detail

    def describe(self, complete_records: int) -> str:
        message = f"{self.damage} {self.codec} stream after {complete_records} complete records"
        return f"{message}: {self.detail}" if self.detail else message


def _codec_for(path: str) -> str | None:
    name = path.lower()
    if name.endswith((".gz", ".gzip")):
        return "gzip"
    if name.endswith((".zst", ".zstd")):
        return "zstd"
    return None


def decompressed_chunks(fileobj: BinaryIO, path: str, chunk_size: int) -> Iterator[bytes]:
    raw_chunks = _read_chunks(fileobj, chunk_size)
    codec = _codec_for(path)
    if codec == "gzip":
        return _gunzip(raw_chunks, chunk_size)
    if codec == "zstd":
        return _unzstd(raw_chunks, chunk_size)
    return raw_chunks


def _read_chunks(fileobj: BinaryIO, chunk_size: int) -> Iterator[bytes]:
    while chunk := fileobj.read(chunk_size):
        yield chunk


def _gunzip(raw_chunks: Iterator[bytes], max_output: int) -> Iterator[bytes]:
    """Decompress any number of concatenated gzip members; output pieces <= max_output."""
    member = None  # decompressor of the member being read; None between members
    for data in raw_chunks:
        while data:
            if member is None:
                data = data.lstrip(b"\0")  # padding between members is allowed
                if not data:
                    break
                member = zlib.decompressobj(_GZIP_WBITS)
            try:
                out = member.decompress(data, max_output)
            except zlib.error as exc:
                raise DamagedStream("gzip", "corrupt", str(exc)) from None
            if out:
                yield out
            if member.eof:
                data, member = member.unused_data, None
            else:
                data = member.unconsumed_tail
    if member is not None:
        # Input ended inside a member: hand out what zlib still holds, then report.
        tail = member.flush()
        if tail:
            yield tail
        if not member.eof:
            raise DamagedStream("gzip", "truncated")


def _unzstd(raw_chunks: Iterator[bytes], target_output: int) -> Iterator[bytes]:
    """Decompress any number of concatenated zstd frames; output pieces of about target_output."""
    zstd = zstandard.ZstdDecompressor()
    frame = None  # decompressor of the frame being read; None between frames
    slice_size = _ZSTD_MIN_SLICE
    for chunk in raw_chunks:
        start = 0
        while start < len(chunk):
            data = chunk[start : start + slice_size]
            start += len(data)
            fed, produced = len(data), 0
            while data:
                if frame is None:
                    frame = zstd.decompressobj()
                try:
                    out = frame.decompress(data)
                except zstandard.ZstdError as exc:
                    raise DamagedStream("zstd", "corrupt", str(exc)) from None
                if out:
                    produced += len(out)
                    yield out
                if frame.eof:
                    data, frame = frame.unused_data, None
                else:
                    data = b""
            slice_size = _next_zstd_slice(slice_size, fed, produced, target_output)
    if frame is not None:
        raise DamagedStream("zstd", "truncated")


def _next_zstd_slice(slice_size: int, fed: int, produced: int, target_output: int) -> int:
    """Input size whose output should be about target_output, at the ratio just seen.

    zstd's decompressobj cannot cap its output, so the input is rationed
    instead: highly repetitive data (ratios in the thousands) gets tiny slices.
    """
    if not produced:  # zstd waits for a whole block before it outputs anything
        return min(_ZSTD_MAX_SLICE, slice_size * 2)
    return max(_ZSTD_MIN_SLICE, min(_ZSTD_MAX_SLICE, fed * target_output // produced))


# --------------------------------------------------------------------------
# Line splitting (jsonl)


class SourceLine(NamedTuple):
    position: int
    byte_offset: int
    data: bytes  # the whole line without b"\n"; only its first 256 bytes if oversized
    size: int  # true length in bytes, without b"\n"
    oversized: bool


class _PartialLine:
    """The unfinished line carried from one chunk to the next.

    Keeps the line's bytes while it fits in max_record_bytes; once it does not,
    keeps only its first PREFIX_BYTES and just counts the rest.
    """

    def __init__(self, max_record_bytes: int):
        self.max_record_bytes = max_record_bytes
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, piece: bytes) -> None:
        was_oversized = self.size > self.max_record_bytes
        self.size += len(piece)
        if self.size <= self.max_record_bytes:
            self.parts.append(piece)
        elif not was_oversized or len(self.parts[0]) < PREFIX_BYTES:
            self.parts = [self.head(piece)]

    def head(self, more: bytes = b"") -> bytes:
        """First PREFIX_BYTES of the line so far followed by `more`."""
        head = b""
        for part in (*self.parts, more):
            head += part[: PREFIX_BYTES - len(head)]
            if len(head) == PREFIX_BYTES:
                break
        return head

    def finish(self, chunk: bytes, start: int, end: int, position: int, offset: int) -> SourceLine:
        """Complete the line with chunk[start:end] and reset for the next one."""
        size = self.size + end - start
        if size <= self.max_record_bytes:
            line = SourceLine(position, offset, b"".join(self.parts) + chunk[start:end], size, False)
        else:
            line = SourceLine(position, offset, self.head(chunk[start:end]), size, True)
        self.parts, self.size = [], 0
        return line


def split_lines(chunks: Iterator[bytes], max_record_bytes: int) -> Iterator[SourceLine | BadRecord]:
    """Split a stream of chunks into lines without holding any oversized line.

    Ends with a BadRecord for the unfinished tail if the stream is damaged.
    """
    partial = _PartialLine(max_record_bytes)
    position = 0
    line_offset = 0  # decompressed offset of the current line's first byte
    chunk_offset = 0  # decompressed offset of the current chunk's first byte
    try:
        for chunk in chunks:
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                if partial.size:  # the line began in an earlier chunk
                    yield partial.finish(chunk, start, newline, position, line_offset)
                elif newline - start <= max_record_bytes:
                    yield SourceLine(position, line_offset, chunk[start:newline], newline - start, False)
                else:
                    head = chunk[start : min(newline, start + PREFIX_BYTES)]
                    yield SourceLine(position, line_offset, head, newline - start, True)
                position += 1
                start = newline + 1
                line_offset = chunk_offset + start
            if start < len(chunk):
                partial.add(chunk[start:] if start else chunk)
            chunk_offset += len(chunk)
    except DamagedStream as damage:
        yield BadRecord(position, line_offset, damage.describe(position), partial.head())
        return
    if partial.size:  # clean end of file after a line without "\n"
        yield partial.finish(b"", 0, 0, position, line_offset)
