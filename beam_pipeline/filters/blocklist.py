"""URL and domain block lists, read from plain list files named in the config.

List files are UTF-8 text, one entry per line; blank lines and lines starting
with ``#`` are ignored. Two kinds of file:

* ``domain_files``: ``example.com`` blocks the host ``example.com`` and every
  subdomain (``www.example.com``, ``a.b.example.com``) -- the convention of
  the UT1 lists used by FineWeb; ``=host.example.com`` blocks exactly that
  host and not its subdomains. Entries are case-insensitive; a leading
  ``*.`` or ``.`` is accepted and means the same as no prefix.
* ``url_substring_files``: a line is a substring matched against the whole
  URL, lower-cased (e.g. ``/wp-login.php``, ``utm_source=spam``).

A document without a URL is never blocked (``blocked`` is ``None``: there is
nothing to check). Lookups walk the host's suffixes (one set probe per
label), and substrings are found with one compiled alternation.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable
from urllib.parse import urlsplit


@dataclasses.dataclass(frozen=True)
class Blocklist:
    domains: frozenset[str]  # host and subdomains
    exact_hosts: frozenset[str]  # host only
    substrings: tuple[str, ...]

    @classmethod
    def from_lines(cls, domain_lines: Iterable[str] = (), substring_lines: Iterable[str] = ()) -> "Blocklist":
        domains, exact = set(), set()
        for entry in _entries(domain_lines):
            entry = entry.lower()
            if entry.startswith("="):
                exact.add(entry[1:].strip(". "))
            else:
                domains.add(entry.removeprefix("*.").strip(". "))
        substrings = tuple(sorted({entry.lower() for entry in _entries(substring_lines)}))
        return cls(frozenset(domains), frozenset(exact), substrings)

    @classmethod
    def from_files(cls, domain_files: Iterable[str] = (), substring_files: Iterable[str] = ()) -> "Blocklist":
        return cls.from_lines(_read_all(domain_files), _read_all(substring_files))

    def __post_init__(self):
        pattern = "|".join(re.escape(s) for s in self.substrings)
        object.__setattr__(self, "_substring_re", re.compile(pattern) if pattern else None)

    def __len__(self) -> int:
        return len(self.domains) + len(self.exact_hosts) + len(self.substrings)

    def match(self, url: str | None) -> str | None:
        """The entry that blocks ``url`` (``domain:x``, ``host:x``, ``url:x``), or None."""
        if not url:
            return None
        host = host_of(url)
        if host:
            if host in self.exact_hosts:
                return f"host:{host}"
            labels = host.split(".")
            for i in range(len(labels)):
                suffix = ".".join(labels[i:])
                if suffix in self.domains:
                    return f"domain:{suffix}"
        if self._substring_re is not None:
            found = self._substring_re.search(url.lower())
            if found:
                return f"url:{found.group(0)}"
        return None

    def score(self, url: str | None) -> dict:
        """The ``blocklist`` layer row (minus ids) for one document."""
        if not url:
            return {"blocked": None, "match": None}
        matched = self.match(url)
        return {"blocked": matched is not None, "match": matched}


def host_of(url: str) -> str:
    """Lower-case host of a URL, without port, credentials or trailing dot."""
    try:
        host = urlsplit(url if "//" in url else "//" + url).hostname or ""
    except ValueError:
        return ""
    return host.rstrip(".")


def _entries(lines: Iterable[str]) -> Iterable[str]:
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


def _read_all(paths: Iterable[str]) -> list[str]:
    from apache_beam.io.filesystems import FileSystems

    lines: list[str] = []
    for path in paths:
        with FileSystems.open(path) as f:
            lines.extend(f.read().decode("utf-8").splitlines())
    return lines
