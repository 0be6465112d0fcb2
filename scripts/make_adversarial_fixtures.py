"""Write the adversarial reader fixtures into tests/fixtures/adversarial/.

Deterministic: running it twice gives byte-identical files (no randomness,
gzip mtime 0, fixed compression levels), as long as zlib/zstd/pyarrow are the
pinned versions. It also writes EXPECTED.json, which maps each fixture to
{"format", "records" (good records), "bad" (bad records), optionally
"max_record_bytes"} as the reader (beam_pipeline/sources/readers.py) must count them.
The counts come from how each fixture is built here, not from running the
reader; for the truncated streams an independent zlib/zstd decode of the cut
file decides how many lines survive.

Usage: python scripts/make_adversarial_fixtures.py [output_dir]
"""
from __future__ import annotations

import gzip
import io
import json
import pathlib
import sys
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "adversarial"

HUGE_LINE_LIMIT = 1 << 20  # max_record_bytes for huge_line.jsonl
HUGE_LINE_BYTES = 1_200_000  # roughly; the huge line is a bit longer than the limit

SENTENCES = [
    "The harbour master walked along the pier before dawn, counting the boats that had come in overnight.",
    "Most of the village gardens were planted with potatoes, beans and a row of sunflowers along the fence.",
    "She kept a notebook of every bird she saw on the marsh, with the date and the weather beside each entry.",
    "The committee agreed to repair the library roof before the autumn rains set in.",
    "A good loaf of bread needs little more than flour, water, salt and a great deal of patience.",
    "The old railway line was turned into a cycle path that now runs for twelve miles through the valley.",
    "Engineers tested the bridge by driving six loaded lorries onto it and measuring how far it sagged.",
    "He learned to play the cello at the age of forty and practised every evening after supper.",
    "The museum's new exhibition traces the history of the printing press from Gutenberg to the present day.",
    "Heavy snow closed the mountain pass for three days, and the supply trucks had to wait in the town below.",
    "Our neighbour repairs clocks in a small workshop behind his house, surrounded by tiny brass gears.",
    "The river rose almost a metre during the night but stayed below the top of the flood wall.",
    "Students spent the afternoon measuring the height of trees in the park using only a stick and their shadows.",
    "The recipe calls for two onions, a tin of tomatoes, a handful of lentils and a pinch of cumin.",
    "After the storm, volunteers cleared fallen branches from the school playground so lessons could resume.",
    "The lighthouse has been automated since 1992, but the keeper's cottage is now a small guest house.",
    "Farmers in the region have started planting hedgerows again to give shelter to insects and birds.",
    "The orchestra rehearsed the symphony for six weeks before the first public performance.",
    "A map from 1850 shows that the market square was once twice as large as it is today.",
    "The bakery on the corner opens at six, and by seven there is usually a queue out of the door.",
    "Scientists measured the temperature of the lake every hour for a year to study how it mixes in spring.",
    "The town council voted to keep the swimming pool open until the end of September this year.",
    "My grandmother wrote letters to her sister in Canada every month for more than fifty years.",
    "The ferry crossing takes about forty minutes when the sea is calm and the wind is from the west.",
    "Local historians are collecting photographs of the mill before it closed in the nineteen sixties.",
    "The new timetable adds an early train on weekdays for people who start work before eight.",
    "Bees visit the lavender along the garden wall from late June until the first cold nights of autumn.",
    "The school play this year is an adaptation of a story about a lost dog finding its way home.",
    "Hikers are advised to carry water and a map, because the signposts on the upper trail are unreliable.",
    "The carpenter sanded the oak table by hand and finished it with three thin coats of oil.",
]


def sentence(index: int) -> str:
    return SENTENCES[index % len(SENTENCES)]


def document(index: int, sentences: int = 3) -> str:
    """A short deterministic document made of consecutive-ish sentences."""
    return " ".join(sentence(index * 7 + k * 3) for k in range(sentences))


def record(index: int, **extra) -> dict:
    return {
        "id": f"doc-{index:04d}",
        "text": document(index),
        "url": f"https://example.org/articles/{index}",
        "date": f"2023-{index % 12 + 1:02d}-{index % 28 + 1:02d}",
        "license": "cc-by-4.0",
        **extra,
    }


def good_line(index: int, **extra) -> bytes:
    return json.dumps(record(index, **extra)).encode("utf-8")


def jsonl(lines: list[bytes], newline: bytes = b"\n", final_newline: bool = True) -> bytes:
    body = newline.join(lines)
    return body + newline if final_newline else body


# Each builder returns (bytes, expected entry). Lines are tagged with their
# verdict so the counts are written down next to the data they describe.
GOOD, BAD, SKIP = "good", "bad", "skip"


def tagged(lines: list[tuple[str, bytes]], newline: bytes = b"\n", final_newline: bool = True):
    data = jsonl([line for _, line in lines], newline, final_newline)
    verdicts = [verdict for verdict, _ in lines]
    return data, {"format": "jsonl", "records": verdicts.count(GOOD), "bad": verdicts.count(BAD)}


def invalid_utf8():
    """Three lines with invalid UTF-8 (stray 0xff, cut multibyte char, CESU surrogate) among good lines."""
    return tagged([
        (GOOD, good_line(0)),
        (GOOD, good_line(1)),
        (BAD, b'{"text": "The price was 12 \xff euros at the market.", "id": "bad-ff"}'),
        (GOOD, good_line(2)),
        (BAD, b'{"text": "She ordered a caf\xc3 and sat by the window.", "id": "bad-cut"}'),
        (BAD, b'{"text": "An encoded surrogate \xed\xa0\x80 is not UTF-8.", "id": "bad-cesu"}'),
        (GOOD, good_line(3)),
    ])


def json_array():
    return tagged([
        (GOOD, good_line(10)),
        (BAD, json.dumps([sentence(1), sentence(2)]).encode()),
        (BAD, json.dumps([record(11)]).encode()),
        (GOOD, good_line(12)),
    ])


def bare_number():
    return tagged([
        (GOOD, good_line(20)),
        (BAD, b"42"),
        (BAD, b"-3.5e10"),
        (GOOD, good_line(21)),
    ])


def broken_json():
    return tagged([
        (GOOD, good_line(30)),
        (BAD, b'{"text": "The ferry left the harbour at noon and never'),  # cut off
        (BAD, b'{"text": "The ferry left at noon." "url": "https://example.org/ferry"}'),  # missing comma
        (BAD, b"{'text': 'Single quotes are not JSON.'}"),
        (BAD, b'{"text": "A trailing comma is not JSON either.",}'),
        (GOOD, good_line(31)),
    ])


def missing_text():
    return tagged([
        (GOOD, good_line(40)),
        (BAD, json.dumps({"id": "no-text", "content": sentence(4), "url": "https://example.org/x"}).encode()),
        (BAD, b"{}"),
        (GOOD, good_line(41)),
    ])


def empty_text():
    """Empty texts are records at reader level (the caller decides); nothing is bad."""
    return tagged([
        (GOOD, json.dumps({"id": "empty-1", "text": ""}).encode()),
        (GOOD, good_line(50)),
        (GOOD, json.dumps({"id": "empty-2", "text": "", "url": "https://example.org/empty"}).encode()),
    ])


def nul_bytes():
    """A \\u0000 escape inside a string is fine; raw NUL bytes make the line invalid JSON."""
    return tagged([
        (GOOD, json.dumps({"id": "escaped-nul", "text": "The form field was left blank\u0000 by mistake."}).encode()),
        (BAD, b'{"id": "raw-nul", "text": "A raw \x00 byte is a control character in a JSON string."}'),
        (BAD, b"\x00\x00\x00"),
        (GOOD, good_line(60)),
    ])


def crlf():
    """Windows line endings everywhere, including a blank CRLF line."""
    return tagged([
        (GOOD, good_line(70)),
        (GOOD, good_line(71)),
        (SKIP, b""),
        (GOOD, good_line(72)),
        (GOOD, good_line(73)),
    ], newline=b"\r\n")


def huge_line():
    """One line just over 1 MiB between two good ones; read with max_record_bytes=1 MiB."""
    paragraphs, size, index = [], 0, 0
    while size < HUGE_LINE_BYTES:
        paragraphs.append(sentence(index))
        size += len(paragraphs[-1]) + 1
        index += 1
    huge = json.dumps({"id": "huge", "text": " ".join(paragraphs)}).encode()
    assert HUGE_LINE_LIMIT < len(huge) < 2_000_000
    data, expected = tagged([(GOOD, good_line(80)), (BAD, huge), (GOOD, good_line(81))])
    return data, {**expected, "max_record_bytes": HUGE_LINE_LIMIT}


def mixed():
    """Many kinds of damage in one file, ending with a good line without a final newline."""
    return tagged([
        (GOOD, good_line(90)),
        (SKIP, b""),
        (BAD, json.dumps([sentence(5)]).encode()),
        (GOOD, good_line(91) + b"\r"),  # one CRLF line in an LF file
        (BAD, b"7"),
        (BAD, b'{"text": "Unclosed object", "id": 3'),
        (BAD, json.dumps({"id": "no-text", "body": sentence(6)}).encode()),
        (GOOD, json.dumps({"id": "empty", "text": ""}).encode()),
        (BAD, b'{"text": "Broken \xe2\x82 euro sign."}'),
        (SKIP, b"   \t  "),
        (BAD, b'{"text": "raw NUL \x00 here"}'),
        (BAD, json.dumps({"id": "numeric-text", "text": 12345}).encode()),
        (BAD, json.dumps({"id": "null-text", "text": None}).encode()),
        (BAD, b'"just a string"'),
        (BAD, b"null"),
        (BAD, b"true"),
        (GOOD, json.dumps({"id": "escaped-nul", "text": "Tab\tand NUL\u0000 escapes."}).encode()),
        (BAD, b'{"id": "lone-surrogate", "text": "Half an emoji \\ud83d here."}'),
        (GOOD, b'{"id": "emoji", "text": "A whole emoji \\ud83d\\ude00 here.", "url": null, "date": 20240105}'),
        (GOOD, good_line(92)),
    ], final_newline=False)


def _complete_lines(decompressed_prefix: bytes) -> int:
    return decompressed_prefix.count(b"\n")


def truncated_gzip():
    """60 good lines, gzip cut at 60% of its length: the lines decoded before the cut survive."""
    plain = jsonl([good_line(100 + i) for i in range(60)])
    compressed = gzip.compress(plain, compresslevel=6, mtime=0)
    cut = compressed[: len(compressed) * 6 // 10]
    decoded = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)  # independent oracle
    assert 0 < _complete_lines(decoded) < 60 and not decoded.endswith(b"\n")
    return cut, {"format": "jsonl", "records": _complete_lines(decoded), "bad": 1}


def _zstd_blocks(plain: bytes, block_bytes: int) -> bytes:
    """One zstd frame with a block flushed every block_bytes of input (mostly mid-line),
    so a cut frame still yields the data of its complete blocks."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    out = []
    for start in range(0, len(plain), block_bytes):
        out.append(compressor.compress(plain[start : start + block_bytes]))
        out.append(compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    out.append(compressor.flush())
    return b"".join(out)


def truncated_zstd():
    """60 good lines in one zstd frame (a block per 700 bytes), cut at 60% of its length."""
    compressed = _zstd_blocks(jsonl([good_line(200 + i) for i in range(60)]), block_bytes=700)
    cut = compressed[: len(compressed) * 6 // 10]
    decoded = zstandard.ZstdDecompressor().decompressobj().decompress(cut)  # independent oracle
    assert 0 < _complete_lines(decoded) < 60 and not decoded.endswith(b"\n")
    return cut, {"format": "jsonl", "records": _complete_lines(decoded), "bad": 1}


def multi_member_gzip():
    """30 lines in three concatenated gzip members; the first boundary falls mid-line."""
    plain = jsonl([good_line(300 + i) for i in range(30)])
    first_cut = plain.index(b"\n", len(plain) // 3) - 20  # inside a line
    second_cut = plain.index(b"\n", 2 * len(plain) // 3) + 1  # on a line boundary
    members = [plain[:first_cut], plain[first_cut:second_cut], plain[second_cut:]]
    data = b"".join(gzip.compress(member, compresslevel=6, mtime=0) for member in members)
    return data, {"format": "jsonl", "records": 30, "bad": 0}


def multi_frame_zstd():
    """20 lines in four concatenated zstd frames; one boundary falls mid-line."""
    plain = jsonl([good_line(400 + i) for i in range(20)])
    quarter = len(plain) // 4
    cuts = [0, quarter, 2 * quarter, 3 * quarter, len(plain)]
    compressor = zstandard.ZstdCompressor(level=3)
    data = b"".join(compressor.compress(plain[a:b]) for a, b in zip(cuts, cuts[1:]))
    return data, {"format": "jsonl", "records": 20, "bad": 0}


def text_bad_byte():
    """A plain-text document with one invalid byte: kept whole, the byte becomes U+FFFD."""
    text = "\n\n".join(document(i, sentences=4) for i in range(5)).encode()
    middle = len(text) // 2
    return text[:middle] + b"\xff" + text[middle:], {"format": "text", "records": 1, "bad": 0}


def text_truncated_gzip():
    """A gzip-compressed text document cut short: one bad record, no partial document."""
    text = "\n\n".join(document(i, sentences=4) for i in range(40)).encode()
    compressed = gzip.compress(text, compresslevel=6, mtime=0)
    return compressed[: len(compressed) // 2], {"format": "text", "records": 0, "bad": 1}


def _parquet_bytes(table: pa.Table, row_group_size: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size)
    return sink.getvalue()


def parquet_null_text():
    """Seven rows in three row groups; rows 2 and 5 have a null text."""
    texts = [document(500 + i) for i in range(7)]
    texts[2] = texts[5] = None
    table = pa.table({
        "id": pa.array(range(500, 507), pa.int64()),
        "text": pa.array(texts, pa.string()),
        "url": pa.array([f"https://example.org/p/{i}" for i in range(7)]),
        "license": pa.array(["cc0", None, "cc-by", "cc0", None, "cc-by", "cc0"]),
    })
    return _parquet_bytes(table, row_group_size=3), {"format": "parquet", "records": 5, "bad": 2}


def parquet_missing_text_column():
    """The document column is called 'content': one bad record for the whole file."""
    table = pa.table({
        "id": pa.array(range(3), pa.int64()),
        "content": pa.array([document(600 + i) for i in range(3)]),
    })
    return _parquet_bytes(table, row_group_size=3), {"format": "parquet", "records": 0, "bad": 1}


def not_parquet():
    """JSONL bytes behind a .parquet name."""
    return jsonl([good_line(700), good_line(701)]), {"format": "parquet", "records": 0, "bad": 1}


FIXTURES = {
    "invalid_utf8.jsonl": invalid_utf8,
    "json_array.jsonl": json_array,
    "bare_number.jsonl": bare_number,
    "broken_json.jsonl": broken_json,
    "missing_text.jsonl": missing_text,
    "empty_text.jsonl": empty_text,
    "nul_bytes.jsonl": nul_bytes,
    "crlf.jsonl": crlf,
    "huge_line.jsonl": huge_line,
    "mixed.jsonl": mixed,
    "truncated.jsonl.gz": truncated_gzip,
    "truncated.jsonl.zst": truncated_zstd,
    "multi_member.jsonl.gz": multi_member_gzip,
    "multi_frame.jsonl.zst": multi_frame_zstd,
    "bad_byte.txt": text_bad_byte,
    "truncated.txt.gz": text_truncated_gzip,
    "null_text.parquet": parquet_null_text,
    "missing_text_column.parquet": parquet_missing_text_column,
    "not_parquet.parquet": not_parquet,
}


def main(out_dir: pathlib.Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, build in FIXTURES.items():
        data, expected[name] = build()
        assert len(data) < 2_000_000, f"{name} is too big to commit ({len(data)} bytes)"
        (out_dir / name).write_bytes(data)
    (out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(FIXTURES)} fixtures and EXPECTED.json to {out_dir}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR)
