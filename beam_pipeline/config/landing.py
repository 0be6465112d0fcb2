"""``sources[].landing``: where a source's files arrive, and when one is complete (docs/config.md).

Read only by ``python -m beam_pipeline land``: a build reads snapshots, never
a landing prefix, so this section is not part of what a build depends on. It
is left out of the config's dumps (``SourceConfig``'s serializer), hence out
of the config digest, every layer key and the dataset manifest: changing a
poll interval never rebuilds anything.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LandingConfig(BaseModel):
    """How the landing job watches one source (docs/operations.md, "Landing arrivals")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str | None = Field(
        None, description="Glob watched for arriving files (local, s3://, gs://); default: the source's uri."
    )
    poll_interval_seconds: float = Field(60.0, gt=0, le=86400, description="Seconds between two listings of the glob.")
    stable_polls: int = Field(
        2,
        ge=1,
        le=1000,
        description="A file lands once this many consecutive polls saw the same size and modification "
        "time (1: at first sight, only for stores where objects appear whole, like S3 and GCS).",
    )
    marker_suffix: str | None = Field(
        None,
        min_length=1,
        description="When set, a file lands as soon as <file><marker_suffix> exists (e.g. '.done'), "
        "whatever the polls saw; marker files themselves never land.",
    )
    window_seconds: int = Field(
        300,
        ge=1,
        le=7 * 86400,
        description="The arrivals log is committed once per window of this many seconds (UTC-aligned).",
    )

    @model_validator(mode="after")
    def _marker_or_polls(self) -> "LandingConfig":
        if self.marker_suffix is not None and "stable_polls" in self.model_fields_set:
            raise ValueError(
                "set marker_suffix or stable_polls, not both: with a marker, the marker "
                "alone says that a file is complete"
            )
        if self.marker_suffix is not None and ("/" in self.marker_suffix or "*" in self.marker_suffix):
            raise ValueError("marker_suffix is appended to a file name: no '/' or '*'")
        return self
