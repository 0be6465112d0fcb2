"""Validation shared by the option classes: values that must match a regex."""
from __future__ import annotations

import argparse
import re


class Matching:
    """argparse ``type``: accept a value only if it fully matches ``regex``."""

    def __init__(self, regex: str, convert=str, what: str = "value"):
        assert regex.startswith("^") and regex.endswith("$"), "anchor the regex: it is also a template regex"
        self.regex = regex
        self.convert = convert
        self.what = what
        self.__name__ = what  # argparse names the type in its error message

    def __call__(self, text: str):
        if not re.fullmatch(self.regex, str(text)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {self.what} (must match {self.regex})")
        return self.convert(text)

    def __repr__(self) -> str:
        return f"Matching({self.regex!r})"
