"""The ``exact_dedup`` and ``near_dedup`` sections of the corpus config (docs/config.md, docs/near_dedup.md).

They live beside the detectors they configure; :mod:`beam_pipeline.config.corpus`
assembles them into the whole config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExactDedupConfig(_Strict):
    enabled: bool = True
    normalize: bool = Field(
        False,
        description="Hash the text with whitespace runs collapsed to one space, ends stripped and case folded "
        "(seed 000 §6): case- and spacing-only variants are exact duplicates. The key only; the text is "
        "kept as it is. Reads the text in exact dedup (docs/filters.md).",
    )
    against: list[str] = Field(
        default_factory=list,
        description="Earlier exact_dedup layers (absolute path/URI) or dataset ids whose texts "
        "this build's copies are duplicates of (a refresh).",
    )


class ShingleConfig(_Strict):
    """Features of a document for MinHash and SimHash (normalization: docs/near_dedup.md)."""

    kind: Literal["word", "char"] = Field("word", description="word n-grams or character n-grams.")
    size: int = Field(5, ge=1, le=64, description="n: words (or characters) per shingle.")


class MinHashConfig(_Strict):
    num_perm: int = Field(112, ge=8, le=1024, description="Values per MinHash signature.")
    threshold: float = Field(0.7, gt=0.0, lt=1.0, description="Target Jaccard similarity of near duplicates.")
    bands: int | None = Field(None, ge=1, description="LSH bands; with rows, overrides the choice from threshold.")
    rows: int | None = Field(None, ge=1, description="Signature values per band.")
    fp_weight: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Weight of the false-positive area when choosing bands (low: candidates are verified anyway).",
    )
    fn_weight: float = Field(0.8, ge=0.0, le=1.0, description="Weight of the false-negative area when choosing bands.")

    @model_validator(mode="after")
    def _bands_rows(self) -> "MinHashConfig":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both bands and rows, or neither (then they are chosen from threshold)")
        if self.bands is not None and self.rows is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands * rows ({self.bands * self.rows}) must not exceed num_perm ({self.num_perm})")
        return self


class SimHashConfig(_Strict):
    max_hamming: int = Field(3, ge=0, le=16, description="Fingerprints within this many bits are near duplicates.")
    blocks: int | None = Field(None, ge=1, le=64, description="Blocks of the 64 bits (default max_hamming + 1).")

    @model_validator(mode="after")
    def _pigeonhole(self) -> "SimHashConfig":
        if self.blocks is not None and self.blocks <= self.max_hamming:
            raise ValueError(f"blocks ({self.blocks}) must exceed max_hamming ({self.max_hamming})")
        return self


class TwoTierConfig(_Strict):
    """``verify: two_tier``: the second tier and short texts (docs/near_dedup.md, "Verification")."""

    low_threshold: float = Field(
        0.4,
        gt=0.0,
        le=1.0,
        description="Second tier: a pair below verify_threshold "
        "passes at this Jaccard if one text is mostly inside the other.",
    )
    containment_threshold: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="Second tier: |A & B| / min(|A|, |B|) a pair needs (Broder 1997); 0.9 keeps partly "
        "translated pages (80-85% inside the original) apart (docs/near_dedup.md).",
    )
    short_shingles: int = Field(
        50,
        ge=0,
        description="Texts with fewer shingles are short: their pairs need "
        "short_threshold (a short text inside a long one is a quote, not a copy).",
    )
    short_threshold: float = Field(0.9, gt=0.0, le=1.0, description="Jaccard a pair with a short text needs.")
    measure: Literal["estimate", "exact"] = Field(
        "exact",
        description="exact: Jaccard and containment from the shingle sets (stored in signatures, carried "
        "through the verification joins: about the text's size again, up to ~20% more CPU in the stage); "
        "estimate: from the signatures and shingle counts (misses pairs near a tier's edge: docs/near_dedup.md, "
        '"Verification").',
    )
    lsh_threshold: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="Similarity for which LSH bands x rows are chosen (unless minhash.bands / rows are set).",
    )

    @model_validator(mode="after")
    def _tiers(self) -> "TwoTierConfig":
        if self.low_threshold > self.short_threshold:
            raise ValueError(
                f"low_threshold ({self.low_threshold}) above short_threshold ({self.short_threshold}): "
                "short texts would pass more easily than long ones"
            )
        return self


class LineDedupConfig(_Strict):
    enabled: bool = Field(True, description="Count lines corpus-wide; boilerplate stays out of signatures.")
    min_repeats: int = Field(100, ge=1, description="Lines in more than this many documents are boilerplate.")
    signature_min_repeats: int | None = Field(
        10,
        ge=1,
        description="Lines in more than this many documents (but not boilerplate) are left out of a "
        "document's signature, not its text, when they are at most half of it (site templates, ads); "
        "null: only boilerplate lines are.",
    )
    min_chars: int = Field(20, ge=1, description="Shorter (normalized) lines are never boilerplate.")


class SubstringDedupConfig(_Strict):
    sources: list[str] = Field(default_factory=list, description="High-risk sources whose repeated spans are removed.")
    min_words: int = Field(50, ge=5, le=10_000, description="Shortest repeated span removed, in words.")


class ClusterAlarmConfig(_Strict):
    """Alarms on near-dup clusters above ``max_cluster_size`` (docs/near_dedup.md, "Large clusters")."""

    max_size: int | None = Field(1000, ge=2, description="Alarm on a cluster with more members; null: no size alarm.")
    max_share: float | None = Field(
        0.01,
        gt=0.0,
        le=1.0,
        description="Alarm on a cluster holding more than this share of the stage's documents; null: no share alarm.",
    )
    action: Literal["warn", "fail"] = Field(
        "warn", description="warn: console and run report; fail: also publish no dataset (the layers stay committed)."
    )
    examples: int = Field(3, ge=1, le=20, description="Largest clusters an alarm shows.")
    max_short_representative_share: float | None = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Warn when more than this share of the clusters has a representative more than 20% "
        "shorter than the cluster's median length (the seed's check); null: no warning.",
    )


class RepresentativeConfig(_Strict):
    """The quality term of a cluster's representative order (docs/near_dedup.md, "Clusters and representatives")."""

    quality: str | None = Field(
        "heuristics.fw_line_punct_ratio",
        pattern=r"^(heuristics|quality|language)\.[a-z0-9_]+$",
        description="<layer>.<column> of a cascade layer before near dedup: higher is better, rounded to "
        "0.01; the order is (source rank, -quality, date, doc_id). Documents without it come last "
        "among their rank; null: no quality term.",
    )


class NearDedupConfig(_Strict):
    """Near-duplicate clusters, boilerplate lines and repeated spans (docs/near_dedup.md)."""

    enabled: bool = False
    method: Literal["minhash", "simhash", "both"] = "minhash"
    seed: int = Field(0, ge=0, lt=1 << 63, description="Seeds shingle hashes, permutations and band keys.")
    shingles: ShingleConfig = ShingleConfig()
    minhash: MinHashConfig = MinHashConfig()
    simhash: SimHashConfig = SimHashConfig()
    verify: Literal["two_tier", "signature", "jaccard", "none"] = Field(
        "two_tier",
        description="Check of each candidate pair: two tiers (Jaccard, or lower Jaccard with "
        "containment), estimated Jaccard, true Jaccard, or none.",
    )
    verify_threshold: float | None = Field(
        None, gt=0.0, le=1.0, description="Defaults to minhash.threshold (with two_tier: its first tier)."
    )
    two_tier: TwoTierConfig = TwoTierConfig()
    max_rounds: int = Field(20, ge=1, le=200, description="Connected-component rounds before the stage fails.")
    max_cluster_size: int = Field(100, ge=2, description="Larger clusters are reported and verified pairwise.")
    sample_members: int = Field(10, ge=1, le=1000, description="Members listed per large cluster.")
    key_groups: int | None = Field(
        None,
        ge=1,
        le=1 << 24,
        description="Groups the LSH keys, signatures, pairs and component edges travel to the runner in "
        "(not in the layer key); default derived from the snapshot's estimated document count so a group "
        "holds at most max_group_entries entries (docs/scale.md).",
    )
    max_group_entries: int = Field(
        1 << 18,
        ge=1 << 10,
        le=1 << 30,
        description="Entries (band keys, signatures, pairs, edges) one group of the stage's shuffles holds "
        "on average in a worker's memory; sets the derived key_groups (not in the layer key, docs/scale.md).",
    )
    alarms: ClusterAlarmConfig = ClusterAlarmConfig()
    representative: RepresentativeConfig = RepresentativeConfig()
    lines: LineDedupConfig = LineDedupConfig()
    substrings: SubstringDedupConfig = SubstringDedupConfig()
    against: list[str] = Field(
        default_factory=list,
        description="Earlier near_dedup layers (absolute path/URI) or dataset ids to dedup against.",
    )
