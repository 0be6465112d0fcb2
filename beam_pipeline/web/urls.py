"""URL normalization: the key under which captures of one page meet.

:func:`normalize_url` is a pure function of its argument. It applies the
syntax-based and scheme-based normalizations of RFC 3986 section 6.2.2-6.2.3
and a few that are safe for crawled pages (the same family of rules as the
SURT canonicalizer of the Internet Archive and the URL keys of Common Crawl's
CDX index, written out here so the key never changes with a library version):

1. surrounding whitespace is removed; the scheme and the host are lowercased;
   a trailing dot of the host is removed;
2. the user information (``user:password@``) is dropped;
3. the default port of the scheme (``:80`` for http, ``:443`` for https) is
   dropped, and an empty port (``host:``) too;
4. percent-encodings are uppercased (``%3a`` -> ``%3A``) and those of
   unreserved characters (letters, digits, ``-._~``) are decoded (``%41`` ->
   ``A``); nothing else is decoded or encoded;
5. dot segments are removed from the path (RFC 3986 5.2.4) and an empty path
   becomes ``/``;
6. the query parameters are sorted (by the raw ``name=value`` strings, a stable
   sort, so repeated names keep their order); empty parameters (``&&``) and an
   empty query (``?``) are dropped;
7. the fragment (``#...``) is dropped.

Not done, on purpose: ``www.`` stripping, http/https unification, trailing
slash removal, tracking-parameter removal, lowercasing of the path: each can
merge different pages on some site. A URL without a scheme and a host (or
one that does not parse) has no key (None) and takes no part in URL-level
deduplication.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def normalize_url(url: str | None) -> str | None:
    """The normalized form of ``url`` (rules in the module docstring), or None if it has no host."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")  # urlsplit lowercases hostname and drops userinfo
    if not scheme or not host:
        return None
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None or str(port) == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    path = _remove_dot_segments(_normalize_percent(parts.path)) or "/"
    params = [p for p in _normalize_percent(parts.query).split("&") if p]
    query = "&".join(sorted(params))
    return urlunsplit((scheme, netloc, path, query, ""))


def _normalize_percent(text: str) -> str:
    def fix(match: re.Match) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _PERCENT.sub(fix, text) if "%" in text else text


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, for an absolute path."""
    if "." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    result = "/".join(output)
    return result if result.startswith("/") or not path.startswith("/") else "/" + result
