"""Paths in a config: local paths and URIs (``gs://``, ``s3://``, ...), resolved against the config's folder."""

from __future__ import annotations

import os
import re
from typing import Any

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def has_scheme(path: str) -> bool:
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return _SCHEME.match(path) is not None


def resolve_path(path: str, base_dir: str) -> str:
    """Resolve ``path`` against ``base_dir`` unless it is absolute or has a scheme."""
    if has_scheme(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base_dir, path))


def tree_bytes(path: str) -> int:
    """Bytes of the files under a local folder (0 for a URI or a missing folder)."""
    total = 0
    if "://" in path:
        return 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def portable_paths(value: Any, base_dir: str | None) -> Any:
    """``value`` (JSON data) with every string under ``base_dir`` made relative to it (``base_dir`` itself: ".")."""
    if base_dir is None:
        return value
    if isinstance(value, dict):
        return {k: portable_paths(v, base_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_paths(v, base_dir) for v in value]
    if isinstance(value, str):
        base = base_dir.rstrip("/")
        if value == base:
            return "."
        if value.startswith(base + "/"):
            return value[len(base) + 1 :]
    return value
