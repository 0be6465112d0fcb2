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

from beam_pipeline.config.extract import ExtractConfig
from beam_pipeline.config.landing import LandingConfig
from beam_pipeline.config.scorers import (
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
from beam_pipeline.dedup.config import (
    ExactDedupConfig,
    NearDedupConfig,
)
from beam_pipeline.policy.config import PolicyConfig, expand_policy_file
from beam_pipeline.records.hashing import digest_json
from beam_pipeline.records.record_types import field_path_problem
from beam_pipeline.storage.paths import has_scheme, portable_paths, resolve_path

SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ConfigError(ValueError):
    """A config file that does not validate; the message lists every problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldMap(_Strict):
    """Which record fields hold the text and the provenance (JSONL and Parquet).

    Each is a field path: ``url`` or, nested, ``metadata.url`` (beam_pipeline/sources/readers.py).
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
            # (beam_pipeline/config/landing.py). model_dump(context={"landing": True}) shows it.
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
