"""The decorator of the package's compiled loops (numba: docs/decisions.md, "MinHash in compiled code")."""

from __future__ import annotations

import numba


def compiled(function):
    """``numba.njit(nogil=True)``, with numba's on-disk cache of the machine code.

    A process compiles a loop at its first call (~0.3-0.5 s each); with the
    cache, the first process on a machine (or in an image) does, and every
    later one loads the code (numba checks the source file, its own version
    and the CPU before it reuses an entry). The cache sits in ``__pycache__``
    beside the module, or in the user's cache folder when the package's is
    read-only; where neither can be written numba refuses to cache, and the
    loop is compiled per process instead. The values do not depend on it.
    """
    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(function)
