"""Tests for beam_pipeline.sources.readers (pure Python, no pipeline needed).

Fixtures come from scripts/make_adversarial_fixtures.py; EXPECTED.json holds
the counts every reader-level (and end-to-end) test must see.
"""
from __future__ import annotations

import gzip
import io
import json
import pathlib
import tracemalloc
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from beam_pipeline.sources.readers import FORMATS, BadRecord, RawRecord, iter_records

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "adversarial"
EXPECTED = json.loads((FIXTURES / "EXPECTED.json").read_text())
JSONL_FIXTURES = sorted(name for name, entry in EXPECTED.items() if entry["format"] == "jsonl")


def read(path, fmt: str, **kwargs) -> list[RawRecord | BadRecord]:
    path = str(path)
    return list(iter_records(lambda: open(path, "rb"), path, fmt, **kwargs))


def read_bytes(data: bytes, name: str, fmt: str = "jsonl", **kwargs) -> list[RawRecord | BadRecord]:
    return list(iter_records(lambda: io.BytesIO(data), name, fmt, **kwargs))


def read_fixture(name: str, **kwargs) -> list[RawRecord | BadRecord]:
    entry = EXPECTED[name]
    if "max_record_bytes" in entry:
        kwargs.setdefault("max_record_bytes", entry["max_record_bytes"])
    return read(FIXTURES / name, entry["format"], **kwargs)


def good(items) -> list[RawRecord]:
    return [item for item in items if isinstance(item, RawRecord)]


def bad(items) -> list[BadRecord]:
    return [item for item in items if isinstance(item, BadRecord)]


def positions(items) -> list[int]:
    return [item.position for item in items]


def record_line(text: str, **fields) -> bytes:
    return json.dumps({"text": text, **fields}).encode()


# --------------------------------------------------------------------------
# Every fixture: exact counts


def test_expected_json_lists_every_fixture():
    on_disk = {path.name for path in FIXTURES.iterdir()} - {"EXPECTED.json"}
    assert on_disk == set(EXPECTED)
    for name, entry in EXPECTED.items():
        assert entry["format"] in FORMATS, name
        assert (FIXTURES / name).stat().st_size < 2_000_000, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_counts(name):
    items = read_fixture(name)
    assert len(good(items)) == EXPECTED[name]["records"]
    assert len(bad(items)) == EXPECTED[name]["bad"]


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 100, 4096])
@pytest.mark.parametrize("name", [name for name in JSONL_FIXTURES if name != "huge_line.jsonl"])
def test_results_do_not_depend_on_chunk_size(name, chunk_size):
    assert read_fixture(name, chunk_size=chunk_size) == read_fixture(name)


def test_results_do_not_depend_on_chunk_size_for_the_huge_line():
    reference = read_fixture("huge_line.jsonl")
    for chunk_size in (1000, 65536, 3 << 20):
        assert read_fixture("huge_line.jsonl", chunk_size=chunk_size) == reference


# --------------------------------------------------------------------------
# JSONL specifics


def test_invalid_utf8_loses_only_its_line():
    items = read_fixture("invalid_utf8.jsonl")
    assert positions(good(items)) == [0, 1, 3, 6]
    assert positions(bad(items)) == [2, 4, 5]
    lines = (FIXTURES / "invalid_utf8.jsonl").read_bytes().split(b"\n")
    for record in bad(items):
        line = lines[record.position]
        assert record.error == f"invalid utf-8 at byte {_valid_prefix_length(line)}"
        assert record.raw_prefix == line[:256]


def _valid_prefix_length(line: bytes) -> int:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    raise AssertionError("line is valid UTF-8")


def test_byte_offsets_and_positions_point_at_the_raw_lines():
    raw = (FIXTURES / "mixed.jsonl").read_bytes()
    lines = raw.split(b"\n")
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line) + 1)
    items = read_fixture("mixed.jsonl")
    for item in items:
        assert item.byte_offset == line_starts[item.position]
        line = lines[item.position]
        if isinstance(item, BadRecord):
            assert item.raw_prefix == line.rstrip(b"\r")[:256]
        else:
            assert json.loads(line)["text"] == item.text
    # blank (1) and whitespace-only (9) lines are skipped, but still counted
    assert 1 not in positions(items) and 9 not in positions(items)
    assert positions(items) == sorted(positions(items))


def test_mixed_file_specifics():
    items = {item.position: item for item in read_fixture("mixed.jsonl")}
    assert positions(good(items.values())) == [0, 3, 7, 16, 18, 19]
    errors = {position: item.error for position, item in items.items() if isinstance(item, BadRecord)}
    assert errors[2] == "record is a JSON array, expected an object"
    assert errors[4] == "record is a JSON number, expected an object"
    assert errors[5].startswith("json: Expecting ',' delimiter")
    assert errors[6] == "missing text field 'text'"
    assert errors[8] == "invalid utf-8 at byte 17"
    assert errors[10].startswith("json: Invalid control character")
    assert errors[11] == "text field 'text' is not a string (got number)"
    assert errors[12] == "text field 'text' is not a string (got null)"
    assert errors[13] == "record is a JSON string, expected an object"
    assert errors[14] == "record is a JSON null, expected an object"
    assert errors[15] == "record is a JSON boolean, expected an object"
    assert "unpaired surrogate" in errors[17] and "\\ud83d" in errors[17]
    assert "\r" not in items[3].text and items[3].record_id == "doc-0091"
    assert items[7].text == ""
    assert items[16].text == "Tab\tand NUL\x00 escapes."
    emoji = items[18]
    assert emoji.text == "A whole emoji \U0001F600 here."
    assert (emoji.url, emoji.date, emoji.license, emoji.record_id) == (None, "20240105", None, "emoji")
    # the last line has no final newline: at a clean end of file it is a normal record
    assert items[19].record_id == "doc-0092"


def test_optional_fields_are_read_from_the_record():
    (first, *_rest) = read_fixture("json_array.jsonl")
    assert first == RawRecord(
        position=0,
        byte_offset=0,
        text=first.text,
        url="https://example.org/articles/10",
        date="2023-11-11",
        license="cc-by-4.0",
        record_id="doc-0010",
    )
    assert first.text.endswith("insects and birds.")


def test_json_array_and_bare_number_lines():
    items = read_fixture("json_array.jsonl")
    assert [item.error for item in bad(items)] == ["record is a JSON array, expected an object"] * 2
    items = read_fixture("bare_number.jsonl")
    assert positions(good(items)) == [0, 3]
    assert [item.raw_prefix for item in bad(items)] == [b"42", b"-3.5e10"]
    assert all("JSON number" in item.error for item in bad(items))


def test_broken_json_lines():
    items = read_fixture("broken_json.jsonl")
    assert positions(good(items)) == [0, 5]
    errors = [item.error for item in bad(items)]
    assert all(error.startswith("json: ") for error in errors)
    assert errors[0].startswith("json: Unterminated string")
    assert errors[1].startswith("json: Expecting ',' delimiter")


def test_missing_text_and_custom_text_field():
    items = read_fixture("missing_text.jsonl")
    assert positions(bad(items)) == [1, 2]
    assert all(item.error == "missing text field 'text'" for item in bad(items))
    items = read_fixture("missing_text.jsonl", text_field="content", id_field="url")
    assert positions(good(items)) == [1]
    assert good(items)[0].record_id == "https://example.org/x"
    assert all(item.error == "missing text field 'content'" for item in bad(items))


def test_empty_text_is_a_record():
    items = read_fixture("empty_text.jsonl")
    assert [item.text for item in items][::2] == ["", ""]
    assert [item.record_id for item in items][::2] == ["empty-1", "empty-2"]


def test_nul_bytes():
    items = read_fixture("nul_bytes.jsonl")
    escaped, raw_nul, only_nuls, plain = items
    assert isinstance(escaped, RawRecord) and "\x00" in escaped.text
    assert isinstance(raw_nul, BadRecord) and raw_nul.error.startswith("json: Invalid control character")
    assert b"\x00" in raw_nul.raw_prefix
    assert isinstance(only_nuls, BadRecord) and only_nuls.raw_prefix == b"\x00\x00\x00"
    assert isinstance(plain, RawRecord)


def test_crlf_lines_have_no_carriage_returns():
    items = read_fixture("crlf.jsonl")
    assert positions(items) == [0, 1, 3, 4]  # line 2 is a blank CRLF line
    for item in items:
        assert "\r" not in item.text and "\r" not in item.record_id and "\r" not in item.license
    raw = (FIXTURES / "crlf.jsonl").read_bytes()
    assert [raw[item.byte_offset : item.byte_offset + 7] for item in items] == [b'{"id": '] * 4


def test_huge_line_is_reported_with_its_true_size():
    raw_lines = (FIXTURES / "huge_line.jsonl").read_bytes().split(b"\n")
    items = read_fixture("huge_line.jsonl")
    assert positions(good(items)) == [0, 2]
    (huge,) = bad(items)
    assert huge.position == 1 and huge.byte_offset == len(raw_lines[0]) + 1
    assert huge.error == f"record of {len(raw_lines[1])} bytes exceeds max_record_bytes=1048576"
    assert huge.raw_prefix == raw_lines[1][:256]
    # with the default limit (8 MiB) the same line is an ordinary record
    assert len(good(read(FIXTURES / "huge_line.jsonl", "jsonl"))) == 3


@pytest.mark.parametrize("chunk_size", [3, 7, 1 << 20])
def test_max_record_bytes_is_exact(chunk_size):
    limit = 100
    fits = record_line("x" * (limit - len(record_line(""))))
    too_big = record_line("y" * (limit + 1 - len(record_line(""))))
    assert (len(fits), len(too_big)) == (limit, limit + 1)
    data = fits + b"\n" + too_big + b"\n" + fits + b"\n" + too_big  # last one without newline
    items = read_bytes(data, "x.jsonl", max_record_bytes=limit, chunk_size=chunk_size)
    assert [type(item) for item in items] == [RawRecord, BadRecord, RawRecord, BadRecord]
    for item in bad(items):
        assert item.error == f"record of {limit + 1} bytes exceeds max_record_bytes={limit}"
        assert item.raw_prefix == too_big
    assert positions(items) == [0, 1, 2, 3]
    assert [item.byte_offset for item in items] == [0, 101, 203, 304]


def test_raw_prefix_keeps_256_bytes_even_with_a_tiny_limit():
    line = record_line("z" * 1000)
    for chunk_size in (5, 300, 1 << 20):
        (item,) = read_bytes(line + b"\n", "x.jsonl", max_record_bytes=10, chunk_size=chunk_size)
        assert item.raw_prefix == line[:256] and f"record of {len(line)} bytes" in item.error


@pytest.mark.parametrize("codec", ["plain", "gzip", "zstd"])
def test_huge_line_is_never_held_in_memory(tmp_path, codec):
    sentence = b"The tide came in over the sand flats much faster than anyone on the beach expected. "
    huge_size = 48 << 20
    plain = tmp_path / "huge.jsonl"
    with open(plain, "wb") as out:
        out.write(record_line("A short first document.") + b"\n")
        out.write(b'{"text": "')
        block = sentence * ((1 << 20) // len(sentence))
        for _ in range(huge_size // len(block)):
            out.write(block)
        out.write(b'"}\n')
        out.write(record_line("A short last document.") + b"\n")
    path = {"plain": plain, "gzip": tmp_path / "huge.jsonl.gz", "zstd": tmp_path / "huge.jsonl.zst"}[codec]
    if codec == "gzip":
        with open(plain, "rb") as source, gzip.open(path, "wb", compresslevel=1) as sink:
            sink.write(source.read())
    elif codec == "zstd":
        path.write_bytes(zstandard.ZstdCompressor(level=1).compress(plain.read_bytes()))
    huge_line_size = len(plain.read_bytes().split(b"\n")[1])

    tracemalloc.start()
    try:
        items = read(path, "jsonl", max_record_bytes=1 << 20)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert [type(item) for item in items] == [RawRecord, BadRecord, RawRecord]
    assert items[1].error == f"record of {huge_line_size} bytes exceeds max_record_bytes=1048576"
    assert len(items[1].raw_prefix) == 256 and items[1].raw_prefix.startswith(b'{"text": "The tide')
    assert items[2].position == 2 and items[2].text == "A short last document."
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB while reading a {huge_line_size >> 20} MiB line"


def test_blank_and_whitespace_lines_are_skipped_but_counted():
    data = b"\n   \n\t\r\n" + record_line("Only document.") + b"\n\n"
    (item,) = read_bytes(data, "x.jsonl")
    assert (item.position, item.byte_offset, item.text) == (3, 8, "Only document.")


def test_utf8_byte_order_mark_at_start_is_ignored():
    data = b"\xef\xbb\xbf" + record_line("First.") + b"\n" + record_line("Second.")
    assert [item.text for item in read_bytes(data, "x.jsonl")] == ["First.", "Second."]


def test_nesting_too_deep_is_a_bad_record():
    data = b"[" * 100_000 + b"]" * 100_000 + b"\n" + record_line("Still read.")
    first, second = read_bytes(data, "x.jsonl")
    assert isinstance(first, BadRecord) and first.error.startswith("json: ")
    assert second.text == "Still read."


def test_empty_files():
    assert read_bytes(b"", "x.jsonl") == []
    assert read_bytes(b"", "x.jsonl.gz") == []
    assert read_bytes(b"", "x.jsonl.zst") == []
    assert read_bytes(b"", "x.txt", "text") == [RawRecord(0, 0, "", None, None, None, None)]


# --------------------------------------------------------------------------
# Compression


def _split_decoded(decoded: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines and the unfinished tail of a decompressed prefix."""
    complete, _, tail = decoded.rpartition(b"\n")
    return (complete.split(b"\n") if complete else []), tail


@pytest.mark.parametrize(
    "name, codec, oracle",
    [
        ("truncated.jsonl.gz", "gzip", lambda raw: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)),
        ("truncated.jsonl.zst", "zstd", lambda raw: zstandard.ZstdDecompressor().decompressobj().decompress(raw)),
    ],
)
@pytest.mark.parametrize("chunk_size", [1, 64, 1 << 20])
def test_truncated_stream_keeps_every_complete_record(name, codec, oracle, chunk_size):
    complete_lines, tail = _split_decoded(oracle((FIXTURES / name).read_bytes()))
    assert complete_lines and tail  # the fixture is cut inside a line

    items = read_fixture(name, chunk_size=chunk_size)

    *records, truncation = items
    assert [record.record_id for record in records] == [json.loads(line)["id"] for line in complete_lines]
    assert all(isinstance(record, RawRecord) for record in records)
    assert isinstance(truncation, BadRecord)
    assert truncation.error == f"truncated {codec} stream after {len(complete_lines)} complete records"
    assert truncation.position == len(complete_lines)
    assert truncation.byte_offset == sum(len(line) + 1 for line in complete_lines)
    assert truncation.raw_prefix == tail[:256]


def test_truncated_stream_never_parses_its_last_line():
    plain = record_line("Complete first line.") + b"\n" + record_line("Looks complete, but the stream is not.")
    cut = gzip.compress(plain, mtime=0)[:-8]  # drop the CRC and size trailer only
    first, truncation = read_bytes(cut, "x.jsonl.gz")
    assert first.text == "Complete first line."
    assert isinstance(truncation, BadRecord) and "truncated gzip" in truncation.error
    assert truncation.raw_prefix == record_line("Looks complete, but the stream is not.")


def test_truncation_right_after_a_member_boundary():
    plain = b"".join(record_line(f"Document number {i}.") + b"\n" for i in range(3))
    data = gzip.compress(plain, mtime=0) + gzip.compress(b"more", mtime=0)[:6]
    *records, truncation = read_bytes(data, "x.jsonl.gz")
    assert len(records) == 3
    assert (truncation.position, truncation.byte_offset, truncation.raw_prefix) == (3, len(plain), b"")
    assert truncation.error == "truncated gzip stream after 3 complete records"


def test_text_file_cut_short_is_one_bad_record():
    (item,) = read_fixture("truncated.txt.gz")
    assert isinstance(item, BadRecord) and item.error.startswith("truncated gzip stream")
    assert (item.position, item.byte_offset) == (0, 0)
    assert len(item.raw_prefix) == 256 and item.raw_prefix.startswith(b"The ")


@pytest.mark.parametrize("chunk_size", [1, 50, 1 << 20])
def test_multi_member_gzip_yields_every_member(chunk_size):
    plain = gzip.decompress((FIXTURES / "multi_member.jsonl.gz").read_bytes())
    items = read_fixture("multi_member.jsonl.gz", chunk_size=chunk_size)
    assert [item.record_id for item in items] == [f"doc-{300 + i:04d}" for i in range(30)]
    assert [item.byte_offset for item in items] == [0] + [i + 1 for i, b in enumerate(plain[:-1]) if b == 10]


@pytest.mark.parametrize("chunk_size", [1, 50, 1 << 20])
def test_multi_frame_zstd_yields_every_frame(chunk_size):
    items = read_fixture("multi_frame.jsonl.zst", chunk_size=chunk_size)
    assert [item.record_id for item in items] == [f"doc-{400 + i:04d}" for i in range(20)]


def test_zero_padding_after_a_gzip_member_is_ignored():
    data = gzip.compress(record_line("Padded.") + b"\n", mtime=0) + b"\0" * 1000
    assert [item.text for item in read_bytes(data, "x.jsonl.gzip")] == ["Padded."]


def test_corrupt_gzip_after_good_data():
    plain = b"".join(record_line(f"Line {i} of a file that goes bad.") + b"\n" for i in range(50))
    data = gzip.compress(plain, mtime=0) + b"\x1f\x8b\x08\x00garbage that is not deflate data"
    items = read_bytes(data, "x.jsonl.gz")
    assert len(good(items)) == 50
    (corrupt,) = bad(items)
    assert corrupt is items[-1] and corrupt.error.startswith("corrupt gzip stream after 50 complete records")


@pytest.mark.parametrize("name", ["x.jsonl.gz", "x.jsonl.zst"])
def test_uncompressed_bytes_behind_a_compressed_name(name):
    (item,) = read_bytes(record_line("Not compressed at all.") + b"\n", name)
    codec = "gzip" if name.endswith(".gz") else "zstd"
    assert isinstance(item, BadRecord) and item.error.startswith(f"corrupt {codec} stream after 0 complete records")


def test_gzip_bomb_stays_bounded():
    data = gzip.compress(b'{"text": "' + b" " * (64 << 20) + b'"}\n' + record_line("After.") + b"\n")
    tracemalloc.start()
    try:
        items = read_bytes(data, "x.jsonl.gz", max_record_bytes=1 << 20)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [type(item) for item in items] == [BadRecord, RawRecord]
    assert peak < 8 << 20


# --------------------------------------------------------------------------
# Text


def test_text_with_a_bad_byte_keeps_the_whole_file():
    raw = (FIXTURES / "bad_byte.txt").read_bytes()
    (item,) = read_fixture("bad_byte.txt")
    assert item == RawRecord(0, 0, raw.decode("utf-8", "replace"), None, None, None, None)
    assert item.text.count("\ufffd") == 1 and len(item.text) == len(raw)


def test_text_multibyte_characters_across_chunks():
    raw = "Crème brûlée, naïve café, 東京, and 🙂 at the end.".encode()
    for chunk_size in (1, 2, 3, 5):
        (item,) = read_bytes(raw, "x.txt", "text", chunk_size=chunk_size)
        assert item.text == raw.decode()


def test_text_bigger_than_the_limit(tmp_path):
    raw = ("The river rose almost a metre during the night. " * 70_000).encode()
    path = tmp_path / "big.txt"
    path.write_bytes(raw)
    (item,) = read(path, "text", max_record_bytes=1 << 20, chunk_size=1 << 16)
    assert isinstance(item, BadRecord)
    assert item.error == f"record of {len(raw)} bytes exceeds max_record_bytes=1048576"
    assert item.raw_prefix == raw[:256]


def test_compressed_text(tmp_path):
    text = "Heavy snow closed the mountain pass for three days.\n"
    path = tmp_path / "doc.txt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    assert read(path, "text") == [RawRecord(0, 0, text, None, None, None, None)]


# --------------------------------------------------------------------------
# Parquet


def test_parquet_null_text_rows():
    items = read_fixture("null_text.parquet")
    assert positions(good(items)) == [0, 1, 3, 4, 6]  # across three row groups
    assert positions(bad(items)) == [2, 5]
    assert all(item.error == "text field 'text' is null" for item in bad(items))
    assert all(item.byte_offset is None for item in items)
    first, second = good(items)[:2]
    assert (first.record_id, first.url, first.license, first.date) == (
        "500",
        "https://example.org/p/0",
        "cc0",
        None,
    )
    assert second.license is None and second.record_id == "501"
    assert all(item.text.endswith(".") for item in good(items))


def test_parquet_missing_text_column():
    (item,) = read_fixture("missing_text_column.parquet")
    assert isinstance(item, BadRecord) and item.position == 0
    assert "'text'" in item.error and "id, content" in item.error
    texts = read_fixture("missing_text_column.parquet", text_field="content")
    assert len(good(texts)) == 3


def test_not_a_parquet_file():
    (item,) = read_fixture("not_parquet.parquet")
    assert item.error.startswith("not a parquet file: ")
    assert item.raw_prefix == (FIXTURES / "not_parquet.parquet").read_bytes()[:256]


def _write_parquet(tmp_path, table: pa.Table, row_group_size: int = 2) -> pathlib.Path:
    path = tmp_path / "table.parquet"
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def test_parquet_oversized_and_undecodable_text(tmp_path):
    texts = pa.array(
        [b"A fine sentence.", b"x" * 5000, b"Broken \xff byte.", None, b"Last one."], pa.binary()
    ).view(pa.string())  # .view skips UTF-8 validation, as a sloppy writer might
    path = _write_parquet(tmp_path, pa.table({"text": texts, "date": pa.array([20240101] * 5)}))
    items = read(path, "parquet", max_record_bytes=1000)
    assert positions(good(items)) == [0, 4]
    assert good(items)[0].date == "20240101"
    oversized, undecodable, null = bad(items)
    assert oversized.error == "record of 5000 bytes exceeds max_record_bytes=1000"
    assert oversized.raw_prefix == b"x" * 256
    assert undecodable.position == 2 and "not valid text" in undecodable.error
    assert null.position == 3


def test_parquet_text_column_that_is_not_string(tmp_path):
    path = _write_parquet(tmp_path, pa.table({"text": pa.array([1, 2, 3]), "url": ["a", "b", "c"]}))
    items = read(path, "parquet")
    assert [item.error for item in items] == ["text field 'text' is not a string (got int)"] * 3
    assert [item.raw_prefix for item in items] == [b"1", b"2", b"3"]


def test_parquet_large_string_and_custom_fields(tmp_path):
    table = pa.table({
        "body": pa.array(["First document.", "Second document."], pa.large_string()),
        "source": ["https://a.example/1", None],
        "uid": [7, 8],
    })
    path = _write_parquet(tmp_path, table)
    items = read(path, "parquet", text_field="body", url_field="source", id_field="uid")
    assert items == [
        RawRecord(0, None, "First document.", "https://a.example/1", None, None, "7"),
        RawRecord(1, None, "Second document.", None, None, None, "8"),
    ]
    # one column may serve two fields
    (first, _) = read(path, "parquet", text_field="body", id_field="body")
    assert first.record_id == first.text == "First document."


def _parquet_with_two_row_groups() -> bytes:
    texts = [f"Document {i} is about the harbour, the boats and the tide tables." * 20 for i in range(6)]
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": texts}), sink, row_group_size=3)
    return sink.getvalue()


def test_parquet_corrupt_row_group_loses_only_that_group():
    data = bytearray(_parquet_with_two_row_groups())
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start + 30 : start + chunk.total_compressed_size - 10] = b"\xab" * (chunk.total_compressed_size - 40)
    items = read_bytes(bytes(data), "x.parquet", "parquet")
    (broken,) = bad(items)
    assert broken.position == 0 and broken.error.startswith("unreadable parquet row group 0, rows 0..2 lost")
    assert positions(good(items)) == [3, 4, 5]


def test_parquet_corrupt_footer_is_not_a_parquet_file():
    data = bytearray(_parquet_with_two_row_groups())
    footer_length = int.from_bytes(data[-8:-4], "little")
    footer_start = len(data) - 8 - footer_length
    data[footer_start + 5 : footer_start + 40] = b"\xff" * 35
    (item,) = read_bytes(bytes(data), "x.parquet", "parquet")
    assert item.error.startswith("not a parquet file: ")


class _FailingFile(io.BytesIO):
    def read(self, *args):
        raise ConnectionError("network down")


@pytest.mark.parametrize("fmt, name", [("jsonl", "x.jsonl.gz"), ("text", "x.txt"), ("parquet", "x.parquet")])
def test_io_errors_propagate_instead_of_becoming_bad_records(fmt, name):
    with pytest.raises(ConnectionError):
        list(iter_records(lambda: _FailingFile(_parquet_with_two_row_groups()), name, fmt))


# --------------------------------------------------------------------------
# API and Beam file objects


def test_unknown_format_is_rejected_before_opening():
    def must_not_open():
        raise AssertionError("opened")

    with pytest.raises(ValueError, match="unknown format 'csv'"):
        iter_records(must_not_open, "x.csv", "csv")


def test_open_is_deferred_and_file_is_closed():
    opened = []

    def open_binary():
        opened.append(io.BytesIO(record_line("One.") + b"\n" + record_line("Two.") + b"\n"))
        return opened[-1]

    records = iter_records(open_binary, "x.jsonl", "jsonl")
    assert not opened
    next(records)
    records.close()
    assert opened[0].closed


@pytest.mark.parametrize(
    "name",
    ["mixed.jsonl", "truncated.jsonl.gz", "multi_frame.jsonl.zst", "bad_byte.txt", "null_text.parquet"],
)
def test_reading_through_beam_filesystems(name):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    path = str(FIXTURES / name)
    fmt = EXPECTED[name]["format"]
    items = list(
        iter_records(
            lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED),
            path,
            fmt,
            chunk_size=4096,
        )
    )
    assert items == read_fixture(name)
    assert (len(good(items)), len(bad(items))) == (EXPECTED[name]["records"], EXPECTED[name]["bad"])
