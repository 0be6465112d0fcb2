"""Charsets, HTML extraction, URL keys and the record policy, on real Debian handbook pages."""
from __future__ import annotations

import gzip
import zlib

import pytest

from beam_pipeline.web.charset import codec_for_label, decode_page, meta_charset
from beam_pipeline.web.extract import html_to_text
from beam_pipeline.web.records import decode_body, newest_capture, payload_digest
from beam_pipeline.web.urls import normalize_url
from web_fixtures import handbook_dir, reencode_page  # noqa: F401  (pytest fixture)

# Pages with the most text in the script of their language (checked: they hold it).
KOREAN = "ko-KR/the-debian-project.html"
JAPANESE = "ja-JP/sect.installation-steps.html"
FRENCH = "fr-FR/sect.installation-steps.html"


def page(handbook_dir, name: str) -> str:
    return (handbook_dir / name).read_text(encoding="utf-8")


def hangul(text: str) -> int:
    return sum("\uac00" <= c <= "\ud7a3" for c in text)


# --------------------------------------------------------------------------
# Charsets: header, then meta tag, then detection; real non-UTF-8 pages


@pytest.mark.parametrize("name, encoding, codec", [
    (KOREAN, "euc-kr", "cp949"), (JAPANESE, "shift_jis", "cp932"), (FRENCH, "windows-1252", "cp1252")])
@pytest.mark.parametrize("declared", ["http", "meta", "none"])
def test_non_utf8_pages_decode_to_the_original_text(handbook_dir, name, encoding, codec, declared):
    original = page(handbook_dir, name)
    body = reencode_page(original, codec, meta=declared == "meta")
    assert _strict_utf8(body) is None  # really not UTF-8
    decoded = decode_page(body, encoding if declared == "http" else None)
    assert decoded.encoding == codec
    assert decoded.how == {"http": "http", "meta": "meta", "none": "detected"}[declared]
    expected = html_to_text(original).text
    assert html_to_text(decoded.text).text == expected  # same text as the UTF-8 page (references resolved)
    assert len(expected) > 1000


def test_euc_kr_without_any_declaration_is_not_taken_for_utf8(handbook_dir):
    body = reencode_page(page(handbook_dir, KOREAN), "euc-kr", meta=False)
    decoded = decode_page(body)
    assert decoded.encoding == "cp949" and decoded.how == "detected"
    assert hangul(decoded.text) > 1000 and "\ufffd" not in decoded.text


def test_a_wrong_declaration_falls_through(handbook_dir):
    korean = reencode_page(page(handbook_dir, KOREAN), "euc-kr", meta=False)
    decoded = decode_page(korean, "utf-8")  # served as UTF-8, is EUC-KR
    assert (decoded.encoding, decoded.how) == ("cp949", "detected")
    utf8 = page(handbook_dir, FRENCH).encode("utf-8")
    decoded = decode_page(utf8, "iso-8859-1")  # the classic: Latin-1 header on a UTF-8 page
    assert (decoded.encoding, decoded.how) == ("utf-8", "http")
    assert "é" in decoded.text


def test_header_wins_over_meta(handbook_dir):
    body = reencode_page(page(handbook_dir, JAPANESE), "shift_jis", meta=True).replace(
        b"charset=shift_jis", b"charset=euc-jp")
    assert decode_page(body, "Shift_JIS").how == "http"


def test_bom_and_labels():
    assert decode_page(b"\xef\xbb\xbf<p>caf\xc3\xa9</p>", "windows-1252") == ("<p>café</p>", "utf-8", "bom")
    assert [codec_for_label(label) for label in ("EUC-KR", "ks_c_5601-1987", "Shift_JIS", "latin1", "GB2312",
                                                 "cp949", "x-unknown", None)] == [
        "cp949", "cp949", "cp932", "cp1252", "gb18030", "cp949", None, None]
    assert meta_charset(b'<head><meta charset="EUC-KR"></head>') == "EUC-KR"
    assert meta_charset(b'<?xml version="1.0" encoding="Shift_JIS"?><html>') == "Shift_JIS"


def _strict_utf8(body: bytes):
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------
# Extraction: title, code blocks, lists, tables


def test_title_is_the_first_line_once(handbook_dir):
    result = html_to_text(page(handbook_dir, "en-US/sect.apt-cache.html"))
    assert result.title == "6.3. The apt-cache Command"
    assert result.text.startswith("6.3.\u00a0The apt-cache Command\n\n")  # the <h1>, with its NBSP
    assert result.text[:200].count("The apt-cache Command") == 1  # the title is not added again
    html = "<html><head><title>Only  in\n title</title></head><body><p>Body text of the page.</p></body></html>"
    assert html_to_text(html).text == "Only in title\n\nBody text of the page."
    assert html_to_text(html, title=False).text == "Body text of the page."
    nbsp = "<html><head><title>4.2.\u00a0Title</title></head><body><h1>4.2.\u00a0Title</h1><p>Body.</p></body></html>"
    assert html_to_text(nbsp).text == "4.2.\u00a0Title\n\nBody."  # white space compared loosely: no repeat


def test_code_blocks_keep_their_lines(handbook_dir):
    text = html_to_text(page(handbook_dir, "en-US/sect.apt-cache.html")).text
    assert "$ apt-cache policy limnoria\nlimnoria:\n  Installed: 2021.06.15-1\n  Candidate:" in text
    assert "Banner" not in text and "Download the ebook" not in text  # navigation is not main content


def test_lists_tables_and_code_of_both_extractors():
    html = ("<html><head><title>T</title></head><body><nav><a href='/'>Home</a></nav><article>"
            "<h1>Heading of the article</h1><p>A paragraph long enough to count as the main content.</p>"
            "<ol><li>first step</li><li>second step</li></ol><ul><li>a bullet item</li></ul>"
            "<table><tr><th>Name</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>"
            "<pre>def f(x):\n    return x + 1</pre></article></body></html>")
    resiliparse = html_to_text(html).text
    assert "  1. first step\n  2. second step" in resiliparse
    assert "a bullet item" not in resiliparse  # main-content mode drops <ul> (docs/web.md)
    assert "• a bullet item" in html_to_text(html, main_content=False).text
    assert "Name\t\tValue\na\t\t1" in resiliparse
    assert "def f(x):\n    return x + 1" in resiliparse
    assert "Home" not in resiliparse
    trafilatura = html_to_text(html, extractor="trafilatura").text
    assert "- first step\n- second step" in trafilatura and "- a bullet item" in trafilatura
    assert "| Name | Value |" in trafilatura
    assert "def f(x):\n    return x + 1" in trafilatura


def test_trafilatura_on_a_real_page(handbook_dir):
    text = html_to_text(page(handbook_dir, KOREAN), extractor="trafilatura").text
    assert hangul(text) > 400 and text.startswith("1장. 데비안 프로젝트\n\n")
    assert text == html_to_text(page(handbook_dir, KOREAN), extractor="trafilatura").text  # deterministic


# --------------------------------------------------------------------------
# URL keys


@pytest.mark.parametrize("url, key", [
    ("HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag", "http://example.com/a/c?a=1&b=2"),
    ("https://example.com:443", "https://example.com/"),
    ("https://example.com:8443/", "https://example.com:8443/"),
    ("http://user:pw@Example.com./%7euser/%3a?", "http://example.com/~user/%3A"),
    ("http://example.com?example=1", "http://example.com/?example=1"),
    ("http://example.com/?b=&a=2&a=1&&", "http://example.com/?a=1&a=2&b="),
    ("http://example.com/A/%41", "http://example.com/A/A"),
    ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ("http://example.com/../a", "http://example.com/a"),
    ("/relative/only", None), ("http://example.com:99999/", None), ("", None), (None, None),
])
def test_normalize_url(url, key):
    assert normalize_url(url) == key
    if key is not None:
        assert normalize_url(key) == key  # idempotent


# --------------------------------------------------------------------------
# Bodies and the newest capture


def test_decode_body():
    html = b"<html><body>" + b"words " * 200 + b"</body></html>"
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (100, html[:100], len(html) - 100, html[100:])
    assert decode_body(chunked, "chunked", None, 1 << 20) == html
    assert decode_body(html, "chunked", None, 1 << 20) == html  # stored de-chunked: taken as is
    assert decode_body(gzip.compress(html), None, "gzip", 1 << 20) == html
    assert decode_body(html, None, "gzip", 1 << 20) == html  # stored decompressed
    assert decode_body(zlib.compress(html)[2:-4], None, "deflate", 1 << 20) == html  # raw deflate
    cut = gzip.compress(html)[:60]  # a body the crawler truncated (WARC-Truncated): the part that decodes
    assert html.startswith(decode_body(cut, None, "gzip", 1 << 20)) and decode_body(cut, None, "gzip", 1 << 20)
    with pytest.raises(ValueError, match="Content-Encoding"):
        decode_body(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 20, None, "gzip", 1 << 20)
    with pytest.raises(ValueError, match="unsupported"):
        decode_body(html, None, "compress", 1 << 20)


def _capture(ts, file="a.warc.gz", position=0, digest=None):
    return {"ts": ts, "digest": digest, "document": {"file": file, "position": position}}


def test_newest_capture_wins_whatever_the_order():
    a, b, c = _capture(1, digest="A"), _capture(3, position=9, digest="B"), _capture(2, file="b", digest="C")
    for order in ([a, b, c], [c, b, a], [b, a, c]):
        assert newest_capture(order, []) is b


def test_a_newer_revisit_brings_back_the_content_it_repeats():
    a, b = _capture(1, digest="A"), _capture(2, position=5, digest="B")
    assert newest_capture([a, b], [{"ts": 3, "digest": "A", "refers_ts": None}]) is a
    assert newest_capture([a, b], [{"ts": 3, "digest": None, "refers_ts": 1}]) is a
    assert newest_capture([a, b], [{"ts": 3, "digest": "Z", "refers_ts": None}]) is b  # original elsewhere
    assert newest_capture([a, b], [{"ts": 1, "digest": "A", "refers_ts": None}]) is b  # older revisit


def test_payload_digest_form():
    assert payload_digest(b"") == "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"  # as in pywb's samples


def test_known_limit_little_non_ascii_text_and_no_label(handbook_dir):
    """A mostly English page with 41 Hangul characters and no label: the detectors guess a Latin code page.

    Documented in docs/web.md; a charset in the header or a meta tag decodes it (tested above).
    """
    body = reencode_page(page(handbook_dir, "ko-KR/sect.apt-cache.html"), "euc-kr", meta=False)
    assert sum(b > 127 for b in body) == 82
    assert decode_page(body).encoding != "cp949"
    assert decode_page(body, "euc-kr").encoding == "cp949"


# --------------------------------------------------------------------------
# Config


def _source(**fields):
    return {"name": "crawl", "uri": "crawl/*.warc.gz", "rank": 5, "license": "x", "domain": "web", **fields}


def test_extract_config_in_sources():
    from beam_pipeline.config.corpus import ConfigError, parse_config

    base = {"name": "c", "output_root": "out", "tokenize": {"tokenizer": "t.json"}}
    config = parse_config({**base, "sources": [_source(format="warc")]})
    assert config.sources[0].extract.extractor == "resiliparse"
    assert config.sources[0].extract.content_types == ["text/html", "application/xhtml+xml", "text/plain"]
    config = parse_config({**base, "sources": [_source(format="warc", extract={
        "extractor": "trafilatura", "content_types": ["TEXT/HTML"], "revisits": "skip"})]})
    assert config.sources[0].extract.content_types == ["text/html"]
    with pytest.raises(ConfigError, match=r"sources\[0\]\.extract\.extractr: unknown field; allowed here: extractor"):
        parse_config({**base, "sources": [_source(format="warc", extract={"extractr": "x"})]})
    with pytest.raises(ConfigError, match="extract applies to format: warc only"):
        parse_config({**base, "sources": [_source(format="jsonl", extract={})]})
    jsonl = parse_config({**base, "sources": [_source(format="jsonl")]}).sources[0]
    assert "extract" not in jsonl.model_dump()  # configs without web sources keep their digests
