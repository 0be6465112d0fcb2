"""A web source's policy applied to its captures: documents, revisits, filtered, bad records.

:func:`iter_web_records` is the one entry point of the ingest DoFn (and of the
benchmark): every record of a split comes out as exactly one of

* :class:`WebDocument`: a document's raw record with its URL key, capture time
  and payload digest (for "newest capture wins");
* :class:`Revisit`: a revisit record (filtered as ``revisit``; with
  ``revisits: newest_capture`` it also takes part in choosing the newest capture);
* :class:`Filtered`: a record the policy does not read, with the reason:
  ``record_type`` (request, metadata, warcinfo, ARC filedesc, ... and types not
  in ``record_types``), ``http_status``, ``content_type``, ``too_small``
  (below ``min_payload_bytes``), ``too_large`` (above ``ingest.max_record_bytes``,
  before or after content decoding);
* :class:`~beam_pipeline.sources.readers.BadRecord`: damage (see
  :mod:`beam_pipeline.web.warc`), a body whose ``Transfer-Encoding`` or
  ``Content-Encoding`` does not decode, or HTML the parser rejects.

The checks run in that order and before the payload is read, so a skipped
record costs no decoding. A payload's text is: the body after transfer and
content decoding (chunked; gzip, deflate, br), decoded to text by
:func:`beam_pipeline.web.charset.decode_page`, then for HTML the extractor's
text (:func:`beam_pipeline.web.extract.html_to_text`); plain text (and WET
``conversion`` records) as decoded.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import zlib
from typing import BinaryIO, Callable, Iterator

from resiliparse.parse.encoding import detect_mime

from beam_pipeline.config.extract import ExtractConfig
from beam_pipeline.records.record_types import BadRecord, RawRecord
from beam_pipeline.web.charset import decode_page
from beam_pipeline.web.extract import html_to_text
from beam_pipeline.web.urls import normalize_url
from beam_pipeline.web.warc import Capture, iter_captures

HTML_TYPES = ("text/html", "application/xhtml+xml")
_PREFIX_BYTES = 256


@dataclasses.dataclass(frozen=True)
class WebDocument:
    record: RawRecord  # text extracted; license None (the source's applies)
    url_key: str | None  # normalize_url(url)
    timestamp: int  # capture time, microseconds since 1970 UTC
    digest: str | None  # WARC-Payload-Digest, or sha1 of the stored body (when revisits can match it)


@dataclasses.dataclass(frozen=True)
class Revisit:
    position: int
    url_key: str | None
    timestamp: int
    digest: str | None  # digest of the payload it repeats
    refers_to_date: int | None  # capture time of the record it repeats, when given


@dataclasses.dataclass(frozen=True)
class Filtered:
    reason: str
    position: int


WebItem = WebDocument | Revisit | Filtered | BadRecord


def iter_web_records(
    open_binary: Callable[[], BinaryIO],
    config: ExtractConfig,
    *,
    max_record_bytes: int,
    start: int = 0,
    end: int | None = None,
) -> Iterator[WebItem]:
    """Every record of the split ``[start, end)`` as one WebItem (see the module docstring)."""

    def select(capture: Capture) -> str | None:
        return skip_reason(capture, config, max_record_bytes)

    for item in iter_captures(open_binary, start=start, end=end, select=select):
        if isinstance(item, BadRecord):
            yield item
        elif item.skip == "revisit":
            yield Revisit(item.position, normalize_url(item.url), item.timestamp, item.digest, item.refers_to_date)
        elif item.skip is not None:
            yield Filtered(item.skip, item.position)
        else:
            yield to_document(item, config, max_record_bytes)


def skip_reason(capture: Capture, config: ExtractConfig, max_record_bytes: int) -> str | None:
    """Why the payload of ``capture`` is not read, or None to read it (order: module docstring)."""
    if capture.kind == "revisit":
        return "revisit"
    if capture.kind not in config.record_types:
        return "record_type"
    if capture.http_status is not None and capture.http_status not in config.statuses:
        return "http_status"
    if capture.mime is not None and _media_type(capture) not in config.content_types:
        return "content_type"
    if capture.payload_size > max_record_bytes:
        return "too_large"
    if capture.payload_size < config.min_payload_bytes:
        return "too_small"
    return None


def to_document(capture: Capture, config: ExtractConfig, max_record_bytes: int) -> WebDocument | Filtered | BadRecord:
    """The document of a capture whose payload was read."""
    try:
        body = decode_body(capture.payload, capture.transfer_encoding, capture.content_encoding, max_record_bytes)
    except _TooLarge:
        return Filtered("too_large", capture.position)
    except ValueError as exc:
        return BadRecord(
            capture.position, capture.byte_offset, f"undecodable body: {exc}", capture.payload[:_PREFIX_BYTES]
        )
    mime = _media_type(capture) if capture.mime is not None else sniff_media_type(body)
    if mime not in config.content_types:
        return Filtered("content_type", capture.position)
    html = mime in HTML_TYPES
    decoded = decode_page(body, capture.charset, html=html)
    text = decoded.text
    if html:
        try:
            text = html_to_text(
                text, extractor=config.extractor, main_content=config.main_content, title=config.title
            ).text
        except Exception as exc:  # resiliparse's HTMLParserException and the like: this page only
            return BadRecord(
                capture.position,
                capture.byte_offset,
                f"HTML extraction failed: {type(exc).__name__}: {exc}",
                body[:_PREFIX_BYTES],
            )
    record = RawRecord(capture.position, capture.byte_offset, text, capture.url, capture.date, None, capture.record_id)
    digest = capture.digest
    if digest is None and config.url_dedup and config.revisits == "newest_capture":  # only revisits match on it
        digest = payload_digest(capture.payload)
    return WebDocument(record, normalize_url(capture.url), capture.timestamp, digest)


def _media_type(capture: Capture) -> str | None:
    return "text/plain" if capture.kind == "conversion" and capture.mime is None else capture.mime


def sniff_media_type(body: bytes) -> str:
    """Media type of a payload without a Content-Type: HTML by its first tag, else resiliparse's guess."""
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head:
        return "text/html"
    return detect_mime(body[:4096])


def payload_digest(payload: bytes) -> str:
    """``sha1:<base32>``, the form of WARC-Payload-Digest."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


class _TooLarge(Exception):
    pass


def decode_body(body: bytes, transfer_encoding: str | None, content_encoding: str | None, limit: int) -> bytes:
    """The entity body: de-chunked, then decompressed; ValueError if it does not decode.

    Crawlers often store the body already decoded but keep the headers (pywb's
    samples, Common Crawl before 2019): a "chunked" body that is not chunked
    and a "gzip" body without the gzip magic bytes are taken as they are. A
    compressed body cut short (``WARC-Truncated``) gives the part that decodes.
    """
    if transfer_encoding and "chunked" in transfer_encoding.lower():
        try:
            body = _dechunk(body)
        except ValueError:
            pass  # stored de-chunked
    for coding in reversed([c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]):
        if coding in ("identity", "none"):
            continue
        if coding in ("gzip", "x-gzip"):
            if body.startswith(b"\x1f\x8b"):  # else stored decompressed
                body = _inflate(body, 16 + zlib.MAX_WBITS, limit)
        elif coding == "deflate":
            try:
                body = _inflate(body, zlib.MAX_WBITS, limit)
            except ValueError:  # servers often send raw deflate without the zlib header
                body = _inflate(body, -zlib.MAX_WBITS, limit)
        elif coding == "br":
            import brotli

            try:
                body = brotli.decompress(body)
            except brotli.error as exc:
                raise ValueError(f"Content-Encoding br: {exc}") from None
            if len(body) > limit:
                raise _TooLarge()
        else:
            raise ValueError(f"unsupported Content-Encoding {coding!r}")
    return body


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"Content-Encoding: {exc}") from None
    if len(out) > limit:
        raise _TooLarge()
    return out


def _dechunk(data: bytes) -> bytes:
    out, pos = [], 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            raise ValueError("Transfer-Encoding chunked: no chunk size line")
        size_text = data[pos:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"Transfer-Encoding chunked: bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            return b"".join(out)
        start = end + 2
        if start + size > len(data):
            raise ValueError("Transfer-Encoding chunked: chunk runs past the end of the body")
        out.append(data[start : start + size])
        pos = start + size + 2


def newest_capture(captures: list[dict], revisits: list[dict]) -> dict:
    """The capture of one URL that stays: the newest, unless a newer revisit points at an older one.

    ``captures``: ``{"ts", "digest", "document": {"file", "position", ...}}``;
    ``revisits``: ``{"ts", "digest", "refers_ts"}``. Captures are ordered by
    (capture time, file, position), a total order, so the choice does not
    depend on the order of the lists. If the newest of all captures and
    revisits is a revisit, the page's newest content is the payload it
    repeats: the newest capture with its digest (or, without a digest, with its
    ``WARC-Refers-To-Date``) stays; if the source holds no such capture, the
    newest capture stays.
    """

    def order(capture: dict) -> tuple:
        return capture["ts"], capture["document"]["file"], capture["document"]["position"]

    newest = max(captures, key=order)
    if revisits:
        latest = max(revisits, key=lambda r: (r["ts"], r["digest"] or "", r["refers_ts"] or 0))
        if latest["ts"] > newest["ts"]:
            repeated = [
                c
                for c in captures
                if (latest["digest"] is not None and c["digest"] == latest["digest"])
                or (latest["digest"] is None and c["ts"] == latest["refers_ts"])
            ]
            if repeated:
                newest = max(repeated, key=order)
    return newest


def iter_raw_records(
    open_binary: Callable[[], BinaryIO], extract: dict | None, max_record_bytes: int
) -> Iterator[RawRecord | BadRecord]:
    """The documents (as raw records) and bad records of a whole file: ``readers.iter_records(fmt="warc")``."""
    config = ExtractConfig.model_validate(extract or {})
    for item in iter_web_records(open_binary, config, max_record_bytes=max_record_bytes):
        if isinstance(item, WebDocument):
            yield item.record
        elif isinstance(item, BadRecord):
            yield item
