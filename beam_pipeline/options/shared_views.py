"""Pipeline options whose views are made once per options class.

Beam's ``PipelineOptions.view_as(cls)`` builds a new argparse parser for
``cls`` and parses the flags again on every call (apache_beam 2.77,
``options/pipeline_options.py``). Constructing a job's graph calls it for every
applied transform and every type check: 2,770 calls, ~1.2 s of the driver's
single-threaded graph phase for the bundled sample (``docs/decisions.md``,
"The sample's build time").

A view holds nothing of its own that can change: every read and write goes to
the ``_all_options`` dict it shares with the options it was made from, and its
parse of the flags is the same each time (the flags are fixed when the options
are made). So handing out the first view of a class again is the same as making
a new one, minus the parser.
"""

from __future__ import annotations

from typing import TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

_View = TypeVar("_View", bound=PipelineOptions)


class SharedViewOptions(PipelineOptions):
    """``PipelineOptions`` (same flags, same values) whose ``view_as`` keeps one view per class.

    It adds no options. :meth:`of` wraps options made elsewhere without parsing
    their flags again; the wrapper shares their values, so a value set through
    either is seen by both.
    """

    @classmethod
    def of(cls, options: PipelineOptions) -> SharedViewOptions:
        if isinstance(options, cls):
            return options
        shared = cls.__new__(cls)
        shared.__dict__.update(
            _flags=options._flags,  # noqa: SLF001 - the state every view of Beam's options shares
            _visible_options=options._visible_options,  # noqa: SLF001
            _all_options=options._all_options,  # noqa: SLF001
        )
        return shared

    def view_as(self, cls: type[_View]) -> _View:
        views = self.__dict__.setdefault("_views", {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view
