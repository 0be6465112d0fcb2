"""URL and domain block lists (filters/blocklist.py)."""
import pytest

from beam_pipeline.filters.blocklist import Blocklist, host_of

LISTS = Blocklist.from_lines(
    ["# comment", "", "example.com", "*.spam.net", ".tracker.org", "=only.this-host.io", "UPPER.case"],
    ["/wp-login.php", "utm_source=spam"])


@pytest.mark.parametrize("url,match", [
    ("https://example.com/page", "domain:example.com"),
    ("http://www.example.com/", "domain:example.com"),            # subdomains too
    ("https://a.b.example.com:8443/x", "domain:example.com"),
    ("https://user:pw@example.com/", "domain:example.com"),
    ("https://spam.net/", "domain:spam.net"),                     # "*." means the same as no prefix
    ("https://x.tracker.org/", "domain:tracker.org"),
    ("https://only.this-host.io/a", "host:only.this-host.io"),    # exact host
    ("https://upper.case/", "domain:upper.case"),                 # case-insensitive
    ("https://EXAMPLE.COM./", "domain:example.com"),              # trailing dot
    ("https://blog.org/wp-login.php?x=1", "url:/wp-login.php"),
    ("https://news.org/a?UTM_SOURCE=spam", "url:utm_source=spam"),
])
def test_blocked(url, match):
    assert LISTS.match(url) == match
    assert LISTS.score(url) == {"blocked": True, "match": match}


@pytest.mark.parametrize("url", [
    "https://notexample.com/",             # suffix of the name, not of the domain
    "https://example.com.evil.org/",       # the listed domain as a subdomain label elsewhere
    "https://sub.only.this-host.io/",      # '=' blocks only the exact host
    "https://example.org/example.com",     # the domain in the path
    "not a url",
])
def test_not_blocked(url):
    assert LISTS.match(url) is None
    assert LISTS.score(url)["blocked"] is False


def test_missing_url_is_unknown_not_clean():
    assert LISTS.score(None) == {"blocked": None, "match": None}
    assert LISTS.score("") == {"blocked": None, "match": None}


def test_files(tmp_path):
    domains = tmp_path / "domains.txt"
    domains.write_text("# hosts\nexample.com\n")
    urls = tmp_path / "urls.txt"
    urls.write_text("_(disambiguation)\n")
    lists = Blocklist.from_files([str(domains)], [str(urls)])
    assert len(lists) == 2
    assert lists.match("https://en.wikipedia.org/wiki/Aberdeen_(disambiguation)") == "url:_(disambiguation)"


def test_host_of():
    assert host_of("https://User@Example.COM:80/x") == "example.com"
    assert host_of("example.com/path") == "example.com"
    assert host_of("http://[::1]:80/") == "::1"
