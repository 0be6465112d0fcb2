"""The keep/drop policy: annotations in, one decision with a named reason out (docs/policy.md).

* ``decision``  the built-in reasons (exact and near duplicates, length, words)
* ``rules``     the rule language over annotation columns, overrides, redaction, floors
"""
