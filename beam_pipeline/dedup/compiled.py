"""The decorator of the package's compiled loops (numba: docs/decisions.md, "MinHash in compiled code")."""

from __future__ import annotations

import functools


class compiled:  # noqa: N801 - used as a decorator, named like one
    """``numba.njit(nogil=True)`` at the first call, with numba's on-disk cache of the machine code.

    numba (and LLVM) are imported only when a loop first runs, so a process
    that never signs a document (the CLI, the driver building a job's graph)
    does not pay for them. A process compiles a loop at its first call
    (~0.3-0.5 s each); with the cache, the first process on a machine (or in
    an image) does, and every later one loads the code (numba checks the
    source file, its own version and the CPU before it reuses an entry). The
    cache sits in ``__pycache__`` beside the module, or in the user's cache
    folder when the package's is read-only (``NUMBA_CACHE_DIR`` overrides
    both); where none can be written numba refuses to cache, and the loop is
    compiled per process instead. The values do not depend on any of it.
    """

    def __init__(self, function):
        functools.update_wrapper(self, function)
        self.py_func = function
        self._dispatcher = None

    def __call__(self, *args):
        dispatcher = self._dispatcher
        if dispatcher is None:
            dispatcher = self.dispatcher
        return dispatcher(*args)

    @property
    def dispatcher(self):
        """The numba dispatcher (its ``stats`` count cache hits and misses), made at the first use."""
        if self._dispatcher is None:
            import numba

            try:
                self._dispatcher = numba.njit(nogil=True, cache=True)(self.py_func)
            except RuntimeError:  # "cannot cache function ...: no locator available"
                self._dispatcher = numba.njit(nogil=True)(self.py_func)
        return self._dispatcher
