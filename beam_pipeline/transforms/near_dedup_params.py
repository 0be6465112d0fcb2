"""What the modules of the near-dedup stage share: the stage's name, the names of its outputs and tagged
collections, and its resolved knobs (:class:`NearDedupParams`).

:mod:`beam_pipeline.transforms.near_dedup` wires the stage from the DoFns and
transforms of ``near_dedup_signing``, ``near_dedup_blocks``,
``near_dedup_candidates``, ``near_dedup_verify`` and ``near_dedup_clusters``;
each tags its outputs with the names here and reads its knobs from
:class:`NearDedupParams`, resolved once from the ``near_dedup`` config section
(``docs/config.md``; bands and rows: ``docs/near_dedup.md``, "LSH bands").
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.dedup import minhash
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.dedup.shingling import NORMALIZATION_VERSION

STAGE = "near_dedup"
ANNOTATIONS, SIGNATURES, LARGE_CLUSTERS, DEAD_LETTER = "annotations", "signatures", "large_clusters", "dead_letter"

MEMBERS, PAYLOADS, BANDS, BLOCKS = "members", "payloads", "bands", "blocks"
MEMBER, PREVIOUS, LABEL, SPAN = "member", "previous", "label", "span"
CLUSTERED, CHECK, ROWS, SIZES = "clustered", "check", "rows", "sizes"
KEYS, SIGNATURE, EDGES, PAIRS, CHECKED = "keys", "signature", "edges", "pairs", "checked"
SHINGLES, SELECTED = "shingles", "selected"


@dataclasses.dataclass(frozen=True)
class NearDedupParams:
    """The resolved knobs of the stage (bands and rows chosen), picklable for workers."""

    seed: int
    shingle_kind: str
    shingle_size: int
    use_minhash: bool
    num_perm: int
    bands: int
    rows: int
    threshold: float
    verify: str
    verify_threshold: float
    low_threshold: float
    containment_threshold: float
    short_shingles: int
    short_threshold: float
    exact_sets: bool
    use_simhash: bool
    max_hamming: int
    blocks: int
    max_rounds: int
    max_cluster_size: int
    sample_members: int
    key_groups: int | None
    max_group_entries: int
    lines: bool
    line_min_repeats: int
    line_signature_min_repeats: int | None
    line_min_chars: int
    span_sources: tuple[str, ...]
    span_min_words: int
    quality: str | None = None

    @classmethod
    def from_config(cls, config: NearDedupConfig) -> "NearDedupParams":
        m, tiers = config.minhash, config.two_tier
        if m.bands is not None:
            bands, rows = m.bands, m.rows
        else:  # two tiers accept pairs below minhash.threshold: their candidates come from a lower curve
            target = tiers.lsh_threshold if config.verify == "two_tier" else m.threshold
            bands, rows = minhash.optimal_bands(target, m.num_perm, m.fp_weight, m.fn_weight)
        return cls(
            seed=config.seed,
            shingle_kind=config.shingles.kind,
            shingle_size=config.shingles.size,
            use_minhash=config.method in ("minhash", "both"),
            num_perm=m.num_perm,
            bands=bands,
            rows=rows,
            threshold=m.threshold,
            verify=config.verify,
            verify_threshold=config.verify_threshold if config.verify_threshold is not None else m.threshold,
            low_threshold=tiers.low_threshold,
            containment_threshold=tiers.containment_threshold,
            short_shingles=tiers.short_shingles,
            short_threshold=tiers.short_threshold,
            exact_sets=config.verify == "jaccard" or (config.verify == "two_tier" and tiers.measure == "exact"),
            use_simhash=config.method in ("simhash", "both"),
            max_hamming=config.simhash.max_hamming,
            blocks=config.simhash.blocks or config.simhash.max_hamming + 1,
            max_rounds=config.max_rounds,
            max_cluster_size=config.max_cluster_size,
            sample_members=config.sample_members,
            key_groups=config.key_groups,
            max_group_entries=config.max_group_entries,
            lines=config.lines.enabled,
            line_min_repeats=config.lines.min_repeats,
            line_min_chars=config.lines.min_chars,
            line_signature_min_repeats=config.lines.signature_min_repeats,
            span_sources=tuple(sorted(config.substrings.sources)),
            span_min_words=config.substrings.min_words,
            quality=config.representative.quality,
        )

    def signature_line_threshold(self) -> int:
        """Lines in more than this many documents stay out of signatures (boilerplate, or template lines)."""
        if self.line_signature_min_repeats is None:
            return self.line_min_repeats
        return min(self.line_min_repeats, self.line_signature_min_repeats)

    def signature_config(self) -> dict:
        """What makes two layers' signatures and band keys comparable (checked for ``against``)."""
        return {
            "normalization": NORMALIZATION_VERSION,
            "seed": self.seed,
            "shingles": {"kind": self.shingle_kind, "size": self.shingle_size},
            "minhash": {"num_perm": self.num_perm, "bands": self.bands, "rows": self.rows}
            if self.use_minhash
            else None,
            "simhash": {"max_hamming": self.max_hamming, "blocks": self.blocks} if self.use_simhash else None,
            "shingle_sets": self.exact_sets,
        }
