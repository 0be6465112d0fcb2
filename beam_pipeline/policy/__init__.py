"""The keep/drop policy: annotations in, one decision with a named reason out (docs/policy.md).

* ``decision``       the built-in reasons (exact and near duplicates, length, words)
* ``conditions``     the rule language over annotation columns: tokenizer, parser, three-valued logic
* ``config``         the ``policy:`` section: rules, overrides, redaction, floors, the policy file
* ``rules``          the policy compiled against a cascade: rule order, gates, the first reason
"""
