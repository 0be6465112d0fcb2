"""WARC/ARC framing on real files (pywb's samples): offsets, splits, damage (beam_pipeline/web/warc.py)."""
from __future__ import annotations

import gzip
import hashlib
import io
import re
import zlib

import pytest

from beam_pipeline.sources.readers import BadRecord
from beam_pipeline.web.archive_streams import plan_splits, sniff
from beam_pipeline.web.warc import Capture, iter_captures
from web_fixtures import cdx_rows, cut_record_in_member, edit_member, pywb_dir  # noqa: F401  (pytest fixture)


def read(data: bytes, **kwargs) -> list:
    return list(iter_captures(lambda: io.BytesIO(data), **kwargs))


def read_split(data: bytes, split_bytes: int) -> list:
    gz, arc = sniff(io.BytesIO(data))
    items = []
    for start, end in plan_splits(len(data), split_bytes, gz=gz, arc=arc):
        items += read(data, start=start, end=end)
    return items


def summary(items) -> list[tuple]:
    """Comparable view: kind/url/offsets of captures, offset/error of bad records."""
    return [("bad", item.position, item.byte_offset, item.error) if isinstance(item, BadRecord)
            else (item.kind, item.position, item.byte_offset, item.url, item.payload_size) for item in items]


def captures(items) -> list[Capture]:
    return [item for item in items if isinstance(item, Capture)]


def bad(items) -> list[BadRecord]:
    return [item for item in items if isinstance(item, BadRecord)]


# --------------------------------------------------------------------------
# Offsets agree with pywb's own CDX index


@pytest.mark.parametrize("warc, cdx", [("iana.warc.gz", "iana.cdx"), ("example.warc.gz", "example.cdx"),
                                      ("dupes.warc.gz", "dupes.cdx")])
def test_response_and_revisit_offsets_match_pywb_cdx(pywb_dir, warc, cdx):
    items = read((pywb_dir / warc).read_bytes())
    assert bad(items) == []
    ours = {(c.url, c.byte_offset, c.kind) for c in captures(items) if c.kind in ("response", "revisit")}
    theirs = {(row["url"], row["offset"], "revisit" if row["mime"] == "warc/revisit" else "response")
              for row in cdx_rows(pywb_dir.parent / "cdx" / cdx) if row["filename"] == warc}
    assert ours == theirs
    for c in captures(items):
        assert c.position == c.byte_offset  # per-record gzip: one record per member


def test_iana_counts_and_provenance(pywb_dir):
    items = read((pywb_dir / "iana.warc.gz").read_bytes())
    kinds = [c.kind for c in captures(items)]
    assert len(items) == 343
    assert {kind: kinds.count(kind) for kind in set(kinds)} == {
        "warcinfo": 1, "request": 171, "response": 48, "revisit": 123}
    first = captures(items)[1]
    assert (first.kind, first.url, first.date, first.http_status, first.mime) == (
        "response", "http://www.iana.org/", "2014-01-26T20:06:24Z", 200, "text/html")
    assert first.record_id == "<urn:uuid:4eec4942-a541-410a-99f4-50de39b62118>"
    assert first.timestamp == 1390766784000000
    assert first.payload.startswith(b"<!doctype html>")


@pytest.mark.parametrize("arc", ["example.arc", "example.arc.gz"])
def test_arc_files_match_pywb_cdx(pywb_dir, arc):
    items = read((pywb_dir / arc).read_bytes())
    (row,) = [r for r in cdx_rows(pywb_dir.parent / "cdx" / "example-arc-test.cdx") if r["filename"] == arc]
    assert [c.kind for c in items] == ["filedesc", "response"]
    response = items[1]
    assert (response.url, response.byte_offset, response.http_status, response.mime, response.date) == (
        row["url"], row["offset"], 200, "text/html", "2014-02-16T05:02:21Z")
    assert response.record_id is None and len(response.payload) == 1270


def test_whole_file_gzip_is_one_member_with_indexed_positions(pywb_dir):
    """pywb's example-bad.warc.gz.bad: all records in one gzip member (not splittable, still read)."""
    data = (pywb_dir / "example-bad.warc.gz.bad").read_bytes()
    items = read(data)
    assert [c.kind for c in items] == ["warcinfo", "response", "request", "revisit", "request", "response"]
    assert [c.byte_offset for c in items] == [0] * 6
    assert [c.position for c in items] == [0, 1, 2, 3, 4, 5]
    assert summary(read_split(data, 1 << 16)) == summary(items)
    assert summary(read_split(data, 100)) == summary(items)  # only the first split finds a boundary


# --------------------------------------------------------------------------
# Broken records in the real samples


def test_wrong_content_length_is_one_bad_record_and_reading_resumes(pywb_dir):
    """example.warc: a request record (at 4061) declares 320 bytes but holds 323: it is the bad record.

    Its block does not end at its Content-Length (3 bytes of it, then the line
    ends, then the next record); the record after it survives.
    """
    data = (pywb_dir / "example.warc").read_bytes()
    items = read(data)
    assert data[4061:4100].startswith(b"WARC/1.0\r\nWARC-Type: request\r\n")
    assert summary(items)[-2][:3] == ("bad", 4061, 4061)
    assert items[-2].error.startswith("record does not end at its Content-Length (320 bytes): followed by b'm\\r\\n")
    assert (items[-1].kind, items[-1].byte_offset, items[-1].url) == (
        "response", 4771, "http://www.iana.org/domains/example")
    assert [c.kind for c in captures(items)] == ["warcinfo", "response", "request", "revisit", "response"]


def test_broken_arc_headers(pywb_dir):
    """bad.arc: lengths -1 and 'abc', an 18-digit date: one bad record each, the valid record read."""
    items = read((pywb_dir / "bad.arc").read_bytes())
    assert [(type(i).__name__, i.byte_offset) for i in items] == [
        ("BadRecord", 0), ("BadRecord", 134), ("Capture", 202), ("BadRecord", 262)]
    assert all("broken ARC header" in b.error for b in bad(items))
    assert items[2].payload == b"\n"


def test_broken_http_status_line_is_a_bad_record(pywb_dir):
    """example-extra.warc holds a response whose status line is 'HTTPX/1.1 200 OK'."""
    items = read((pywb_dir / "example-extra.warc").read_bytes())
    (broken,) = bad(items)
    assert broken.byte_offset == 3207 and broken.error.startswith("broken HTTP header")
    assert len(captures(items)) == 5


# --------------------------------------------------------------------------
# Damage made to a real per-record gzip file


@pytest.fixture(scope="module")
def iana(pywb_dir) -> bytes:
    return (pywb_dir / "iana.warc.gz").read_bytes()


@pytest.fixture(scope="module")
def iana_clean(iana) -> list:
    return summary(read(iana))


def members(iana_clean) -> list[int]:
    return sorted({entry[2] for entry in iana_clean})


def _without(clean: list, offset: int) -> list:
    return [entry for entry in clean if entry[2] != offset]


def test_corrupt_member_costs_one_record(iana, iana_clean):
    target = members(iana_clean)[100]
    damaged = bytearray(iana)
    damaged[target + 40:target + 60] = bytes(b ^ 0xFF for b in damaged[target + 40:target + 60])
    items = read(bytes(damaged))
    (broken,) = bad(items)
    assert broken.byte_offset == target and broken.error.startswith("corrupt gzip member")
    assert broken.raw_prefix == bytes(damaged[target:target + 256])
    assert [s for s in summary(items) if s[0] != "bad"] == _without(iana_clean, target)


def test_garbage_between_members_is_skipped(iana, iana_clean):
    target = members(iana_clean)[50]
    items = read(iana[:target] + b"garbage\x00\x01" * 20 + iana[target:])
    (broken,) = bad(items)
    assert broken.byte_offset == target and broken.error.startswith("not a gzip member")
    assert len(captures(items)) == len(iana_clean)


@pytest.mark.parametrize("cut", [10, 300])
def test_truncated_file_keeps_every_complete_record(iana, iana_clean, cut):
    target = members(iana_clean)[200]
    items = read(iana[:target + cut])
    (broken,) = bad(items)
    assert broken.byte_offset == target and "truncated gzip member" in broken.error
    assert summary(captures(items)) == [s for s in iana_clean if s[2] < target]


def test_plain_warc_truncated_in_a_payload(pywb_dir):
    data = (pywb_dir / "example.warc").read_bytes()[:3000]
    items = read(data)
    assert summary(items)[-1] == ("bad", 2451, 2451, "truncated record: 166 of 323 payload bytes")


def test_missing_required_header_is_a_bad_record(pywb_dir):
    data = (pywb_dir / "example.warc").read_bytes().replace(b"WARC-Date: 2014-01-03T03:03:21Z\r\n", b"", 1)
    items = read(data)
    assert summary(items)[1] == ("bad", 460, 460, "broken WARC header: no WARC-Date")
    assert [c.kind for c in captures(items)] == ["warcinfo", "request", "revisit", "response"]  # + the 320/323 one


# --------------------------------------------------------------------------
# A record cut short inside a complete gzip member: it must not run on into the next record


def iana_response(pywb_dir, url: str) -> dict:
    """pywb's own CDX row (offset and length of the member) of a response in iana.warc.gz."""
    (row,) = [r for r in cdx_rows(pywb_dir.parent / "cdx" / "iana.cdx")
              if r["filename"] == "iana.warc.gz" and r["url"] == url and r["status"] == "200"]
    return row


def payload_digests(items) -> dict:
    """position -> sha1 of the payload of every capture (what a reader made of each record)."""
    return {c.position: hashlib.sha1(c.payload or b"").hexdigest() for c in captures(items)}


# where the writer stopped: inside the WARC header, inside the HTTP header, in the payload, 1 byte short
CUTS = {"warc header": lambda record: 100,
        "http header": lambda record: record.index(b"\r\n\r\n") + 40,
        "payload 60%": lambda record: len(record) * 6 // 10,
        "last payload byte": lambda record: len(record) - 5}
RESPONSES = ["http://www.iana.org/protocols", "http://www.iana.org/_js/2013.1/jquery.js", "http://www.iana.org/"]


@pytest.mark.parametrize("url", RESPONSES)
@pytest.mark.parametrize("cut", list(CUTS))
def test_record_cut_short_in_its_member_is_dead_lettered_and_the_next_record_is_intact(pywb_dir, iana, url, cut):
    row = iana_response(pywb_dir, url)
    damaged, record = cut_record_in_member(iana, row["offset"], row["length"], CUTS[cut](
        gzip.decompress(iana[row["offset"]:row["offset"] + row["length"]])))
    clean = read(iana)
    items = read(damaged)
    (broken,) = bad(items)
    assert (broken.position, broken.byte_offset) == (row["offset"], row["offset"])
    assert broken.error.startswith("truncated record" if cut != "warc header" else "broken WARC header: no ")
    assert broken.raw_prefix == damaged[row["offset"]:row["offset"] + 256]
    # every other record, the one right after the damage included, is read as from the intact file
    shift = len(damaged) - len(iana)
    expected = [(kind, pos + shift * (pos > row["offset"]), off + shift * (off > row["offset"]), u, size)
                for kind, pos, off, u, size in summary(captures(clean)) if off != row["offset"]]
    assert summary(captures(items)) == expected
    after = next(c for c in captures(items) if c.byte_offset > row["offset"])
    assert after.byte_offset == row["offset"] + len(damaged[row["offset"]:]) - len(iana[row["offset"] + row["length"]:])
    assert after.kind == "request" and after.url == url
    ours = payload_digests(items)
    theirs = {pos + shift * (pos > row["offset"]): digest for pos, digest in payload_digests(clean).items()
              if pos != row["offset"]}
    assert ours == theirs
    assert not any(b"WARC-Type:" in (c.payload or b"") for c in captures(items))


def test_the_truncated_page_is_no_document_and_the_next_page_is(pywb_dir, iana):
    """Through the source policy (records.py): no document holds another record's WARC or HTTP headers."""
    from beam_pipeline.config.extract import ExtractConfig
    from beam_pipeline.web.records import WebDocument, iter_web_records

    row = iana_response(pywb_dir, "http://www.iana.org/protocols")
    damaged, _ = cut_record_in_member(iana, row["offset"], row["length"], 20_000)

    def documents(data):
        items = list(iter_web_records(lambda: io.BytesIO(data), ExtractConfig(), max_record_bytes=1 << 24))
        return [i for i in items if isinstance(i, WebDocument)], bad(items)

    clean_docs, clean_bad = documents(iana)
    docs, broken = documents(damaged)
    assert clean_bad == [] and [b.byte_offset for b in broken] == [row["offset"]]
    assert "truncated record" in broken[0].error
    assert {d.record.url for d in clean_docs} - {d.record.url for d in docs} == {"http://www.iana.org/protocols"}
    assert len(docs) == len(clean_docs) - 1
    for doc in docs:
        assert "WARC-Type" not in doc.record.text and "WARC/1.0" not in doc.record.text
        assert "HTTP/1.1 200" not in doc.record.text
    shift = len(damaged) - len(iana)
    assert sorted((d.record.url, d.record.text) for d in docs) == sorted(
        (d.record.url, d.record.text) for d in clean_docs if d.record.url != "http://www.iana.org/protocols")
    assert {d.record.position for d in docs} == {
        d.record.position + shift * (d.record.position > row["offset"]) for d in clean_docs
        if d.record.url != "http://www.iana.org/protocols"}


def test_bytes_after_the_content_length_inside_a_member(pywb_dir, iana):
    """A record whose Content-Length is shorter than its block: the record is bad, the next member intact."""
    row = iana_response(pywb_dir, "http://www.iana.org/domains")
    def shorter(record: bytes) -> bytes:
        declared = re.search(rb"\r\nContent-Length: (\d+)\r\n", record)
        return record.replace(declared.group(0), b"\r\nContent-Length: %d\r\n" % (int(declared.group(1)) - 50), 1)

    damaged = edit_member(iana, row["offset"], row["length"], shorter)
    clean = read(iana)
    items = read(damaged)
    (broken,) = bad(items)
    assert broken.byte_offset == row["offset"]
    assert broken.error.startswith("record does not end at its Content-Length (")
    shift = len(damaged) - len(iana)
    assert summary(captures(items)) == [
        (kind, pos + shift * (pos > row["offset"]), off + shift * (off > row["offset"]), u, size)
        for kind, pos, off, u, size in summary(captures(clean)) if off != row["offset"]]


def splits_around(offset: int, length: int) -> list[int]:
    """split_bytes values whose split points fall on, inside and right after the member at ``offset``."""
    return [offset, offset + 7, offset + length // 2, offset + length - 1, offset + length, offset + length + 1,
            (offset + length // 2) // 3]


@pytest.mark.parametrize("url", RESPONSES[:2])
def test_splits_crossing_a_record_cut_short(pywb_dir, iana, url):
    row = iana_response(pywb_dir, url)
    damaged, record = cut_record_in_member(iana, row["offset"], row["length"], len(
        gzip.decompress(iana[row["offset"]:row["offset"] + row["length"]])) // 2)
    whole = summary(read(damaged))
    assert [s[2] for s in whole if s[0] == "bad"] == [row["offset"]]
    for split_bytes in splits_around(row["offset"], row["length"]):
        starts = [start for start, _ in plan_splits(len(damaged), split_bytes, gz=True, arc=False)]
        assert any(row["offset"] <= start <= row["offset"] + row["length"] + 1 for start in starts)
        assert summary(read_split(damaged, split_bytes)) == whole, split_bytes


@pytest.fixture(scope="module")
def iana_plain(pywb_dir, iana) -> tuple[bytes, dict]:
    """iana.warc.gz as a plain WARC, and each member's (offset, length) there by its offset in the gzip file."""
    rows = cdx_rows(pywb_dir.parent / "cdx" / "iana.cdx")
    starts = sorted({r["offset"] for r in rows if r["filename"] == "iana.warc.gz"} | {0})
    plain, where = b"", {}
    pos = 0
    while pos < len(iana):  # member by member, independently of the reader
        inflater = zlib.decompressobj(31)
        record = inflater.decompress(iana[pos:])
        where[pos] = (len(plain), len(record))
        plain += record
        pos = len(iana) - len(inflater.unused_data)
    assert set(starts) <= set(where)
    return plain, where


@pytest.mark.parametrize("url", RESPONSES)
def test_plain_warc_record_cut_short_before_the_next_record(pywb_dir, iana_plain, url):
    """Uncompressed: the record's Content-Length runs into the next record; that one is read intact."""
    plain, where = iana_plain
    offset, length = where[iana_response(pywb_dir, url)["offset"]]
    cut = length // 2
    damaged = plain[:offset + cut] + plain[offset + length:]
    clean = read(plain)
    items = read(damaged)
    (broken,) = bad(items)
    assert broken.byte_offset == offset
    assert broken.error.startswith(("record does not end at its Content-Length", "truncated record"))
    shift = -(length - cut)
    expected = [(kind, pos + shift * (pos > offset), off + shift * (off > offset), u, size)
                for kind, pos, off, u, size in summary(captures(clean)) if off != offset]
    assert summary(captures(items)) == expected
    assert payload_digests(items) == {pos + shift * (pos > offset): digest
                                      for pos, digest in payload_digests(clean).items() if pos != offset}
    for split_bytes in splits_around(offset, cut):
        assert summary(read_split(damaged, split_bytes)) == summary(items), split_bytes


@pytest.mark.parametrize("cut, error", [(200, "broken HTTP header"), (600, "truncated record"),
                                        (3000, "truncated record")])
def test_plain_warc_last_record_cut_short_swallowing_the_one_after(pywb_dir, iana_plain, cut, error):
    """The cut record's Content-Length reaches past the end of the file: the record after it is still read.

    Cut at 200 bytes, inside its WARC header: the next record's header lines
    join it (its HTTP "status line" is then the request line of the next
    record); at 600 and 3000 bytes its payload runs to the end of the file.
    """
    plain, where = iana_plain
    offsets = sorted(off for off, _ in where.values())
    offset, length = where[iana_response(pywb_dir, "http://www.iana.org/")["offset"]]
    nxt = offsets[offsets.index(offset) + 1]
    end = offsets[offsets.index(offset) + 2]
    damaged = plain[:offset + cut] + plain[nxt:end]  # the cut record, then the (short) request after it, then EOF
    items = read(damaged)
    assert [type(i).__name__ for i in items] == ["Capture", "BadRecord", "Capture"]
    assert items[1].byte_offset == offset and items[1].error.startswith(error)
    request = read(plain[nxt:end])[0]
    assert (items[2].kind, items[2].byte_offset, items[2].record_id, items[2].payload) == (
        "request", offset + cut, request.record_id, request.payload)


def test_gzipped_arc_record_cut_short_in_its_member(pywb_dir):
    """example.arc.gz: filedesc, a response cut short in a closed member, then an intact copy of the response."""
    data = (pywb_dir / "example.arc.gz").read_bytes()
    (row,) = [r for r in cdx_rows(pywb_dir.parent / "cdx" / "example-arc-test.cdx") if r["filename"] == "example.arc.gz"]
    member = data[row["offset"]:row["offset"] + row["length"]]
    damaged, _ = cut_record_in_member(data, row["offset"], row["length"], 700)
    damaged += member
    items = read(damaged)
    assert [type(i).__name__ for i in items] == ["Capture", "BadRecord", "Capture"]
    assert items[1].byte_offset == row["offset"] and "truncated record" in items[1].error
    clean = read(data)[1]
    assert (items[2].url, items[2].payload, items[2].byte_offset) == (clean.url, clean.payload, len(damaged) - len(member))


# --------------------------------------------------------------------------
# Splits: any split size gives exactly the records of one whole read


@pytest.mark.parametrize("split_bytes", [1 << 16, 100_000, 333_333])
def test_splits_partition_the_records(iana, iana_clean, split_bytes):
    assert len(plan_splits(len(iana), split_bytes, gz=True, arc=False)) > 1
    assert summary(read_split(iana, split_bytes)) == iana_clean


@pytest.mark.parametrize("split_bytes", [1 << 16, 200_000])
def test_splits_partition_damage_too(iana, iana_clean, split_bytes):
    damaged = bytearray(iana)
    for target in members(iana_clean)[10::40]:  # several corrupt members, some near split points
        damaged[target + 30:target + 40] = b"\xff" * 10
    whole = summary(read(bytes(damaged)))
    assert len([s for s in whole if s[0] == "bad"]) == len(members(iana_clean)[10::40])
    assert summary(read_split(bytes(damaged), split_bytes)) == whole


@pytest.mark.parametrize("split_bytes", [1 << 16])
def test_plain_warc_splits(pywb_dir, split_bytes):
    data = (pywb_dir / "example.warc").read_bytes() * 40  # 225 KB of plain records, one broken each copy
    whole = summary(read(data))
    assert len(plan_splits(len(data), split_bytes, gz=False, arc=False)) == 4
    assert summary(read_split(data, split_bytes)) == whole


def test_plain_arc_is_never_split(pywb_dir):
    assert plan_splits(1 << 30, 1 << 20, gz=False, arc=True) == [(0, None)]
    assert len(plan_splits(1 << 30, 1 << 20, gz=True, arc=True)) == 1024


def test_select_skips_payloads(pywb_dir):
    items = read((pywb_dir / "iana.warc.gz").read_bytes(),
                 select=lambda c: None if c.mime == "text/html" else "not html")
    assert all((c.payload is None) == (c.skip == "not html") for c in captures(items))
    assert sum(c.payload is not None for c in captures(items)) == 20


def test_readers_iter_records_reads_web_archives(pywb_dir):
    from beam_pipeline.sources.readers import RawRecord, iter_records

    path = pywb_dir / "example.warc"
    items = list(iter_records(lambda: open(path, "rb"), str(path), "warc"))
    assert [(type(i).__name__, i.position) for i in items] == [("RawRecord", 460), ("BadRecord", 4061)]
    assert isinstance(items[0], RawRecord) and items[0].url == "http://example.com?example=1"
    assert items[0].text.startswith("Example Domain\n\nThis domain is established")
    assert items[0].record_id == "<urn:uuid:6d058047-ede2-4a13-be79-90c17c631dd4>"
