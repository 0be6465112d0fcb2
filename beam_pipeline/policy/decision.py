"""The keep/drop policy: annotations in, one decision with a named reason out.

Pure functions, no Beam: ``select`` applies :func:`decide` to every document,
and a changed policy is re-applied to existing annotations without rerunning
any scorer. Rules are checked in a fixed order and the first that fires names
the reason, so every dropped document has exactly one reason:

1. ``exact_duplicate``  a member of an exact-duplicate group that is not its
   representative (when ``policy.drop_exact_duplicates``);
2. ``near_duplicate``  a member of a near-duplicate cluster that is not its
   representative, or a copy of a document of a previous version (when
   ``policy.drop_near_duplicates``; see docs/near_dedup.md);
3. ``too_short`` / ``too_long``  character count outside
   [``min_chars``, ``max_chars``];
4. ``too_few_words``  fewer than ``min_words`` whitespace-separated words.
"""

from __future__ import annotations

from beam_pipeline.policy.config import PolicyConfig

REASONS = ("exact_duplicate", "near_duplicate", "too_short", "too_long", "too_few_words")


def decide(document: dict, exact: dict | None, policy: PolicyConfig, near: dict | None = None) -> str | None:
    """The drop reason for ``document``, or None to keep it.

    ``exact`` is the document's exact-dedup annotation (None when that stage
    is disabled: absent scores never drop a document); ``near`` likewise its
    near-dedup annotation.
    """
    if policy.drop_exact_duplicates and exact is not None and exact["is_duplicate"]:
        return "exact_duplicate"
    if policy.drop_near_duplicates and near is not None and near["is_duplicate"]:
        return "near_duplicate"
    n_chars = document["n_chars"]
    if n_chars < policy.min_chars:
        return "too_short"
    if n_chars > policy.max_chars:
        return "too_long"
    if policy.min_words and count_words(document["text"], stop_at=policy.min_words) < policy.min_words:
        return "too_few_words"
    return None


def count_words(text: str, stop_at: int | None = None) -> int:
    """Whitespace-separated words; stops counting at ``stop_at`` when given."""
    if stop_at is None:
        return len(text.split())
    return len(text.split(maxsplit=stop_at))


def violations(document: dict, exact: dict | None, policy: PolicyConfig, near: dict | None = None) -> list[str]:
    """Every built-in reason that applies to ``document``, in :data:`REASONS` order (:func:`decide` names the
    first). ``select``'s floors rank dropped documents by how many rules they fail (docs/policy.md)."""
    out = []
    if policy.drop_exact_duplicates and exact is not None and exact["is_duplicate"]:
        out.append("exact_duplicate")
    if policy.drop_near_duplicates and near is not None and near["is_duplicate"]:
        out.append("near_duplicate")
    n_chars = document["n_chars"]
    if n_chars < policy.min_chars:
        out.append("too_short")
    if n_chars > policy.max_chars:
        out.append("too_long")
    if policy.min_words and count_words(document["text"], stop_at=policy.min_words) < policy.min_words:
        out.append("too_few_words")
    return out
