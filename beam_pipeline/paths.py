"""Paths in a config: local paths and URIs (``gs://``, ``s3://``, ...), resolved against the config's folder."""

from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def has_scheme(path: str) -> bool:
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return _SCHEME.match(path) is not None


def resolve_path(path: str, base_dir: str) -> str:
    """Resolve ``path`` against ``base_dir`` unless it is absolute or has a scheme."""
    if has_scheme(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base_dir, path))
