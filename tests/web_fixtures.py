"""Real web-archive inputs for the web tests: pywb's samples, Debian handbook pages, WARC writing.

The samples are fetched (and cached) by ``scripts/fetch_web_fixtures.py``:
pywb's sdist from PyPI (its files are GPL-3.0 and stay out of the repository)
and the debian-handbook .deb from the Debian archive. WARC files built from the
handbook pages are written with FastWARC's record writer, one gzip member per
record (as crawlers write them).
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import re
import uuid
from pathlib import Path

import pytest
from fastwarc.warc import WarcRecord, WarcRecordType

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fetch_web_fixtures", REPO / "scripts" / "fetch_web_fixtures.py")
fetch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fetch)


@pytest.fixture(scope="session")
def pywb_dir() -> Path:
    """pywb-2.10.0/sample_archive/warcs (and ../cdx)."""
    return fetch.pywb_warcs()


@pytest.fixture(scope="session")
def handbook_dir() -> Path:
    """debian-handbook HTML: <lang>/<page>.html."""
    return fetch.handbook_pages()


def cdx_rows(path: Path) -> list[dict]:
    """Rows of a CDX 11-field file (`` CDX N b a m s k r M S V g``)."""
    rows = []
    for line in path.read_text().splitlines()[1:]:
        key, timestamp, url, mime, status, digest, _, _, length, offset, filename = line.split(" ")
        rows.append({"url": url, "timestamp": timestamp, "mime": mime, "status": status, "digest": digest,
                     "length": int(length), "offset": int(offset), "filename": filename})
    return rows


def reencode_page(html: str, encoding: str, *, meta: bool) -> bytes:
    """A UTF-8 page re-encoded (characters the encoding lacks become &#N; references).

    The meta tag and the XML declaration are rewritten to name ``encoding``
    (``meta=True``) or removed (``meta=False``).
    """
    html = re.sub(r"<\?xml[^>]*\?>\s*", "", html)
    replacement = f'<meta http-equiv="Content-Type" content="text/html; charset={encoding}" />' if meta else ""
    html = re.sub(r"<meta[^>]*charset=[^>]*>", replacement, html, count=1, flags=re.IGNORECASE)
    return html.encode(encoding, errors="xmlcharrefreplace")


def record_id(*parts: str) -> bytes:
    return f"uuid:{uuid.UUID(bytes=hashlib.sha1('|'.join(parts).encode()).digest()[:16])}".encode()


def warc_record(kind: str, url: str | None, date: str, block: bytes, *, content_type: str | None = None,
                extra: dict | None = None) -> bytes:
    """One WARC/1.1 record, serialized by FastWARC (block and payload digests included)."""
    record = WarcRecord()
    record.init_headers(getattr(WarcRecordType, kind), record_urn=record_id(kind, url or "", date))
    record.headers["WARC-Date"] = date
    if url is not None:
        record.headers["WARC-Target-URI"] = url
    record.headers["Content-Type"] = content_type or {
        "response": "application/http; msgtype=response", "revisit": "application/http; msgtype=response",
        "request": "application/http; msgtype=request", "warcinfo": "application/warc-fields",
        "conversion": "text/plain", "metadata": "application/warc-fields"}[kind]
    for name, value in (extra or {}).items():
        record.headers[name] = value
    record.set_bytes_content(block)
    buffer = io.BytesIO()
    record.write(buffer, checksum_data=kind in ("response", "resource", "conversion"))
    return buffer.getvalue()


def http_response(body: bytes, content_type: str = "text/html", status: str = "200 OK", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def write_warc(path: Path, records: list[bytes], *, gz: bool = True) -> list[int]:
    """Write records (one gzip member each when gz); returns each record's stored offset."""
    offsets, data = [], b""
    for record in records:
        offsets.append(len(data))
        data += gzip.compress(record, compresslevel=6, mtime=0) if gz else record
    path.write_bytes(data)
    return offsets


def cut_record_in_member(data: bytes, offset: int, length: int, keep: int) -> tuple[bytes, bytes]:
    """A real per-record gzip WARC whose record at ``offset`` was cut short inside a *complete* member.

    The gzip member ``[offset, offset + length)`` (from pywb's CDX) is
    decompressed, cut to its first ``keep`` bytes and compressed again as a
    whole member: the writer lost the end of the record but closed the member,
    and the file goes on with the next record's member. Returns the damaged
    file and the record's original bytes.
    """
    record = gzip.decompress(data[offset:offset + length])
    assert keep < len(record)
    return data[:offset] + gzip.compress(record[:keep], compresslevel=6, mtime=0) + data[offset + length:], record


def edit_member(data: bytes, offset: int, length: int, edit) -> bytes:
    """The file with the member ``[offset, offset + length)`` replaced by one holding ``edit(record)``."""
    record = gzip.decompress(data[offset:offset + length])
    return data[:offset] + gzip.compress(edit(record), compresslevel=6, mtime=0) + data[offset + length:]
