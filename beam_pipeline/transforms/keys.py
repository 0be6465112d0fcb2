"""Output types of every keying step, so grouping keys get deterministic coders.

Without a type hint Beam encodes an ``Any`` key with a "deterministic" pickle
fallback that fails, or silently differs, on types such as numpy scalars
(apache/beam #33020). Each ``Map`` that builds a key for a ``GroupByKey``,
``CoGroupByKey`` or ``CombinePerKey`` declares one of these types, which gives
``StrUtf8Coder`` or ``VarIntCoder`` keys; ``tests/test_coders.py`` checks every
grouping in every stage's job.
"""

from apache_beam.typehints import Any, Tuple

StrKeyed = Tuple[str, Any]
IntKeyed = Tuple[int, Any]
