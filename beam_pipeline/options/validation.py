"""Validation shared by the option classes: values that must match a regex."""

from __future__ import annotations

import argparse
import re


class Matching:
    """argparse ``type``: accept a value only if it fully matches ``regex``.

    ``relative=True`` also accepts a relative local path on the command line
    (the regex, which is also the Flex Template's, asks for an absolute one).
    """

    def __init__(self, regex: str, convert=str, what: str = "value", relative: bool = False):
        assert regex.startswith("^") and regex.endswith("$"), "anchor the regex: it is also a template regex"
        self.regex = regex
        self.convert = convert
        self.what = what
        self.relative = relative
        self.__name__ = what  # argparse names the type in its error message

    def __call__(self, text: str):
        text = str(text)
        if not (
            re.fullmatch(self.regex, text) or (self.relative and text and not text[0].isspace() and "://" not in text)
        ):
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {self.what} (must match {self.regex})")
        return self.convert(text)

    def __repr__(self) -> str:
        return f"Matching({self.regex!r})"
