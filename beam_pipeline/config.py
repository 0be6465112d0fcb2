"""The corpus build configuration: one YAML file, validated on load.

A config names the sources, the parameters of every stage, the keep/drop
policy, the tokenizer and the shard layout. It is validated with pydantic
(unknown fields are errors, so a typo never silently falls back to a
default); :func:`load_config` turns every validation failure into a
:class:`ConfigError` whose lines name the field, the bad value and what is
allowed. See ``docs/config.md`` for the full reference.

Relative paths in the file (source URIs, tokenizer, output root) are resolved
against the directory of the config file, so a config and its data can move
together. URIs with a scheme (``s3://``, ``gs://``, ``hdfs://``) are kept.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from beam_pipeline.arrivals.config import LandingConfig
from beam_pipeline.hashing import digest_json
from beam_pipeline.paths import has_scheme, resolve_path
from beam_pipeline.policy_rules import FloorsConfig, OverrideConfig, RedactConfig, RuleConfig, expand_policy_file
from beam_pipeline.readers import field_path_problem
from beam_pipeline.scoring.config import (
    BlocklistConfig,
    CascadeConfig,
    DecontaminationConfig,
    HeuristicsConfig,
    LanguageConfig,
    PiiConfig,
    QualityConfig,
    SafetyConfig,
    check_scoring,
    resolve_paths,
    resolved_stages,
)
from beam_pipeline.web.config import ExtractConfig

SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ConfigError(ValueError):
    """A config file that does not validate; the message lists every problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldMap(_Strict):
    """Which record fields hold the text and the provenance (JSONL and Parquet).

    Each is a field path: ``url`` or, nested, ``metadata.url`` (beam_pipeline/readers.py).
    """

    text: str = "text"
    url: str = "url"
    date: str = "date"
    license: str = "license"
    id: str = "id"

    @field_validator("text", "url", "date", "license", "id")
    @classmethod
    def _field_path(cls, value: str) -> str:
        problem = field_path_problem(value)
        if problem:
            raise ValueError(f"not a field path: {problem}")
        return value


class SourceConfig(_Strict):
    """One input source: a glob on any Beam filesystem and what it is."""

    name: str = Field(description="Short unique name; part of every doc_id from this source.")
    uri: str = Field(description="Glob on any Beam filesystem (local, s3://, gs://, hdfs://).")
    format: Literal["jsonl", "parquet", "text", "warc"] = Field(
        description="jsonl (.jsonl, .jsonl.gz, .jsonl.zst), parquet, text (one document per file), "
        "or warc (WARC, WET, ARC; plain or gzip: docs/web.md)."
    )
    rank: int = Field(ge=0, description="Source rank: lower wins when duplicates are resolved.")
    license: str = Field(min_length=1, description="Default license of the records (a record's own field wins).")
    domain: str = Field(description="Domain bucket; shards are homogeneous by bucket.")
    fields: FieldMap = FieldMap()
    extract: ExtractConfig | None = Field(None, description="format warc only: records and text extraction.")
    landing: LandingConfig | None = Field(
        None, description="Where files arrive for the landing job (`land`); not part of any digest."
    )

    @model_validator(mode="before")
    @classmethod
    def _extract_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("format") == "warc" and data.get("extract") is None:
            data = {**data, "extract": {}}
        return data

    @model_validator(mode="after")
    def _extract_only_for_warc(self) -> "SourceConfig":
        if self.extract is not None and self.format != "warc":
            raise ValueError("extract applies to format: warc only")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_extract(self, handler, info):
        data = handler(self)  # a source without `extract` dumps as before it existed (same layer keys)
        if isinstance(data, dict) and data.get("extract") is None:
            data.pop("extract", None)
        if isinstance(data, dict) and not (info.context or {}).get("landing"):
            # Read by the landing job only: never in a digest, a layer key or a manifest
            # (beam_pipeline/arrivals/config.py). model_dump(context={"landing": True}) shows it.
            data.pop("landing", None)
        return data

    @field_validator("name", "domain")
    @classmethod
    def _simple_name(cls, value: str) -> str:
        if not SOURCE_NAME.match(value):
            raise ValueError(
                "must be 1-64 characters of lowercase letters, digits, '_', '.', '-', starting with a letter or digit"
            )
        return value


class SnapshotConfig(_Strict):
    """How input files are fingerprinted in the snapshot manifest."""

    checksum: Literal["sha256", "filesystem"] = Field(
        "sha256",
        description="sha256 reads every byte (exact, any filesystem); 'filesystem' uses the "
        "store's own checksum (S3 ETag, GCS crc32c; only the size on local disk).",
    )


class IngestConfig(_Strict):
    max_record_bytes: int = Field(8 << 20, ge=1024, description="Larger records are dead-lettered before parsing.")
    slice_bytes: int = Field(
        1 << 20,
        ge=1 << 16,
        description="About this many bytes of text per slice of an output partition: ingest groups its "
        "records by slice, so one grouped element the runner hands a worker holds one slice, not a whole "
        "partition (docs/flink.md, 'What one element carries'). Not in the layer key: the layer is the same "
        "bytes for any value.",
    )


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
        if self.bands is not None and self.bands * self.rows > self.num_perm:
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


class PolicyConfig(_Strict):
    """The keep/drop policy applied by ``select``: annotations in, decisions out."""

    drop_exact_duplicates: bool = True
    drop_near_duplicates: bool = True
    strip_boilerplate_lines: bool = Field(True, description="Remove lines the near-dedup stage marked as boilerplate.")
    strip_repeated_spans: bool = Field(True, description="Remove spans the near-dedup stage found repeated.")
    min_chars: int = Field(1, ge=0, description="Drop documents with fewer characters (reason too_short).")
    max_chars: int = Field(1_000_000, ge=1, description="Drop documents with more characters (reason too_long).")
    min_words: int = Field(0, ge=0, description="Drop documents with fewer whitespace-separated words (too_few_words).")
    rules: list[RuleConfig] = Field(default_factory=list, description="Rules over annotation columns (docs/policy.md).")
    overrides: list[OverrideConfig] = Field(default_factory=list, description="Per-source / per-domain rule changes.")
    redact: RedactConfig = RedactConfig()
    floors: FloorsConfig | None = Field(None, description="Keep-rate floors per slice (docs/policy.md, Floors).")

    @model_validator(mode="after")
    def _bounds(self) -> "PolicyConfig":
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must not exceed max_chars ({self.max_chars})")
        return self


class TokenizeConfig(_Strict):
    tokenizer: str = Field(description="Path or URI of a Hugging Face tokenizer.json.")
    eos_token: str = "<|endoftext|>"
    pad_token: str | None = Field(None, description="Fills the tail of a shard's last sequence; defaults to eos_token.")
    seq_len: int = Field(8192, ge=16, le=1 << 20)
    shard_tokens: int = Field(
        1 << 28,
        ge=16,
        description="Target tokens per shard (shards are cut per domain); "
        "the default is about 1 GB of uint32 tokens (512 MB of uint16).",
    )
    batch_size: int = Field(256, ge=1, le=65536, description="Documents per tokenizer call.")
    sort_memory_bytes: int = Field(
        256 << 20,
        ge=1,
        description="Tokens of one shard a worker holds while "
        "ordering it; beyond, sorted runs spill to local disk. Not in the layer key.",
    )

    @model_validator(mode="after")
    def _shard_holds_sequences(self) -> "TokenizeConfig":
        if self.shard_tokens < self.seq_len:
            raise ValueError(f"shard_tokens ({self.shard_tokens}) must be at least seq_len ({self.seq_len})")
        return self


class LayoutConfig(_Strict):
    target_partition_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Uncompressed input bytes per layer partition (sets the partition count; a worker "
        "holds one partition in memory to sort it).",
    )
    min_partitions: int = Field(
        4,
        ge=1,
        le=100_000,
        description="At least this many partitions, and the count is a multiple of it: set it to the number of "
        "workers (or a multiple) so each gets the same share of a per-partition stage.",
    )


class AccountingConfig(_Strict):
    max_dead_letter_fraction: float = Field(
        0.01, ge=0.0, le=1.0, description="A stage whose dead letters exceed this fraction of its input fails the run."
    )


class ReportConfig(_Strict):
    """What the run report compares the dataset with; a view only (not part of the config digest)."""

    target_tokens: int | None = Field(None, ge=1, description="Tokens the training run will draw from the dataset.")
    mixture: dict[str, float] = Field(
        default_factory=dict, description="Target share of each domain bucket (normalized to sum 1)."
    )
    max_epochs: float = Field(4.0, gt=0, description="Warn when a bucket must be repeated more often than this.")
    samples_per_reason: int = Field(20, ge=0, le=1000, description="Dropped documents shown per drop reason.")


class CorpusConfig(_Strict):
    """A whole corpus build. ``config_dir`` is set by :func:`load_config`."""

    name: str
    output_root: str
    seed: int = Field(0, ge=0, lt=1 << 63)
    sources: list[SourceConfig] = Field(min_length=1)
    snapshot: SnapshotConfig = SnapshotConfig()
    ingest: IngestConfig = IngestConfig()
    exact_dedup: ExactDedupConfig = ExactDedupConfig()
    near_dedup: NearDedupConfig = NearDedupConfig()
    policy: PolicyConfig = PolicyConfig()
    tokenize: TokenizeConfig
    layout: LayoutConfig = LayoutConfig()
    accounting: AccountingConfig = AccountingConfig()
    report: ReportConfig = ReportConfig()
    cascade: CascadeConfig = CascadeConfig()  # scorer stages in order (docs/filters.md)
    language: LanguageConfig = LanguageConfig()
    heuristics: HeuristicsConfig = HeuristicsConfig()
    blocklist: BlocklistConfig = BlocklistConfig()
    quality: QualityConfig = QualityConfig()
    safety: SafetyConfig = SafetyConfig()
    pii: PiiConfig = PiiConfig()
    decontamination: DecontaminationConfig = DecontaminationConfig()
    _base_dir: str | None = PrivateAttr(None)  # the config file's folder: relative paths were resolved against it

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SOURCE_NAME.match(value):
            raise ValueError("must be 1-64 characters of lowercase letters, digits, '_', '.', '-'")
        return value

    @model_validator(mode="after")
    def _unique_sources(self) -> "CorpusConfig":
        names = [s.name for s in self.sources]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"source names must be unique; repeated: {', '.join(repeated)}")
        unknown = sorted(set(self.near_dedup.substrings.sources) - set(names))
        if unknown:
            raise ValueError(f"near_dedup.substrings.sources names unknown sources: {', '.join(unknown)}")
        return self

    @model_validator(mode="after")
    def _scoring(self) -> "CorpusConfig":
        # the dedup stages take their place in the cascade (scoring/config.py: resolved_stages)
        stages = resolved_stages(self.cascade.stages, self.exact_dedup.enabled, self.near_dedup.enabled)
        object.__setattr__(self, "cascade", self.cascade.model_copy(update={"stages": stages}))
        check_scoring(self)  # cascade order and dependencies, rules vs. layers (scoring/config.py)
        return self

    def source(self, name: str) -> SourceConfig:
        for source in self.sources:
            if source.name == name:
                return source
        raise KeyError(name)

    def digest(self) -> str:
        """sha256 of the canonical config (what the build depends on, not where it writes or is checked out).

        Over :meth:`portable_dump`: without ``output_root`` and ``report``
        (``report`` only changes how a run is shown, never the data), paths
        inside the config's folder relative to it.
        """
        return digest_json(self.portable_dump())

    def portable_dump(self) -> dict:
        """The config as JSON data without ``output_root`` and ``report``, free of the checkout's location.

        Every string that is a path inside the config file's folder (as
        resolved by :func:`parse_config`) is written relative to that folder,
        as in the YAML: copying the config with its data elsewhere gives the
        same dump. Other paths (absolute in the YAML, outside the folder, with
        a scheme) are kept as they are.
        """
        return portable_paths(self.model_dump(mode="json", exclude={"output_root", "report"}), self._base_dir)

    def portable_path(self, path: str) -> str:
        """``path`` relative to the config's folder when it lies inside it, else unchanged."""
        return portable_paths(path, self._base_dir)


def portable_paths(value: Any, base_dir: str | None) -> Any:
    """``value`` (JSON data) with every string under ``base_dir`` made relative to it (``base_dir`` itself: ".")."""
    if base_dir is None:
        return value
    if isinstance(value, dict):
        return {k: portable_paths(v, base_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_paths(v, base_dir) for v in value]
    if isinstance(value, str):
        base = base_dir.rstrip("/")
        if value == base:
            return "."
        if value.startswith(base + "/"):
            return value[len(base) + 1 :]
    return value


def parse_config(data: Any, *, base_dir: str = ".", source_name: str = "<config>") -> CorpusConfig:
    """Validate a parsed YAML mapping; relative paths are resolved against ``base_dir``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source_name}: the top level must be a mapping of fields, got {type(data).__name__}")
    try:
        config = CorpusConfig.model_validate(expand_policy_file(data, base_dir))
    except ValidationError as err:
        raise ConfigError(_describe(err, source_name)) from None
    except ValueError as err:  # a policy file that cannot be read
        raise ConfigError(f"{source_name}: {err}") from None
    resolved = config.model_copy(
        update={
            "output_root": resolve_path(config.output_root, base_dir),
            "sources": [_resolve_source(s, base_dir) for s in config.sources],
            "tokenize": config.tokenize.model_copy(
                update={"tokenizer": resolve_path(config.tokenize.tokenizer, base_dir)}
            ),
            **resolve_paths(config, base_dir),  # models, lists, eval sets of the scoring stages
        }
    )
    resolved._base_dir = resolve_path(base_dir, os.getcwd()) if not has_scheme(base_dir) else base_dir
    return resolved


def _resolve_source(source: SourceConfig, base_dir: str) -> SourceConfig:
    update = {"uri": resolve_path(source.uri, base_dir)}
    if source.landing is not None and source.landing.uri is not None:
        update["landing"] = source.landing.model_copy(update={"uri": resolve_path(source.landing.uri, base_dir)})
    return source.model_copy(update=update)


def load_config(path: str) -> CorpusConfig:
    """Read and validate a corpus config file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return parse_config(data, base_dir=os.path.dirname(os.path.abspath(path)), source_name=path)


def _describe(err: ValidationError, source_name: str) -> str:
    lines = [f"{source_name}: {err.error_count()} problem(s) in the config:"]
    for problem in err.errors():
        where = _location(problem["loc"])
        kind = problem["type"]
        value = problem.get("input")
        if kind == "extra_forbidden":
            lines.append(f"  {where}: unknown field; allowed here: {_allowed_fields(problem['loc'])}")
        elif kind == "missing":
            lines.append(f"  {where}: required field is missing")
        else:
            shown = "" if not problem["loc"] else f" (got {value!r})"  # top level: the message names the fields
            lines.append(f"  {where}: {problem['msg']}{shown}")
    return "\n".join(lines)


def _location(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _allowed_fields(loc: tuple) -> str:
    model: type[BaseModel] = CorpusConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        inner = getattr(annotation, "__args__", (annotation,))
        model = next((t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)), model)
    return ", ".join(model.model_fields)
