"""WARC/ARC framing on real files (pywb's samples): offsets, splits, damage (beam_pipeline/web/warc.py)."""
from __future__ import annotations

import io

import pytest

from beam_pipeline.readers import BadRecord
from beam_pipeline.web.warc import Capture, iter_captures, plan_splits, sniff
from web_fixtures import cdx_rows, pywb_dir  # noqa: F401  (pytest fixture)


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
    """example.warc: a request record declares 320 bytes but holds 323; the record after it survives."""
    items = read((pywb_dir / "example.warc").read_bytes())
    assert summary(items)[-2][:3] == ("bad", 4764, 4764)
    assert "Invalid WARC header" in items[-2].error and "skipped 7 bytes" in items[-2].error
    assert (items[-1].kind, items[-1].byte_offset, items[-1].url) == (
        "response", 4771, "http://www.iana.org/domains/example")
    assert len(items) == 7


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
    assert [c.kind for c in captures(items)] == ["warcinfo", "request", "revisit", "request", "response"]


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
    from beam_pipeline.readers import RawRecord, iter_records

    path = pywb_dir / "example.warc"
    items = list(iter_records(lambda: open(path, "rb"), str(path), "warc"))
    assert [(type(i).__name__, i.position) for i in items] == [("RawRecord", 460), ("BadRecord", 4764)]
    assert isinstance(items[0], RawRecord) and items[0].url == "http://example.com?example=1"
    assert items[0].text.startswith("Example Domain\n\nThis domain is established")
    assert items[0].record_id == "<urn:uuid:6d058047-ede2-4a13-be79-90c17c631dd4>"
