"""``sources[].extract``: how a ``format: warc`` source becomes documents (docs/web.md, docs/config.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_CONTENT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


class ExtractConfig(BaseModel):
    """Which records of a web archive become documents, and how their text is extracted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extractor: Literal["resiliparse", "trafilatura"] = Field(
        "resiliparse", description="HTML to text: resiliparse (fast, default) or trafilatura (articles, ~15x slower)."
    )
    main_content: bool = Field(True, description="Keep only the main content (drop navigation, headers, footers).")
    title: bool = Field(True, description="Put the page <title> on the first line unless the text starts with it.")
    record_types: list[Literal["response", "resource", "conversion"]] = Field(
        ["response", "conversion"],
        description="WARC record types read (conversion: the text records of WET files). request, metadata, "
        "warcinfo and the rest are filtered as record_type; revisits follow `revisits`.",
    )
    content_types: list[str] = Field(
        list(DEFAULT_CONTENT_TYPES),
        description="Media types read (HTTP Content-Type without parameters; sniffed when missing).",
    )
    statuses: list[int] = Field([200], description="HTTP status codes read (records without HTTP are not checked).")
    min_payload_bytes: int = Field(0, ge=0, description="Smaller payloads are filtered as too_small.")
    revisits: Literal["skip", "newest_capture"] = Field(
        "newest_capture",
        description="skip: a revisit record only counts as filtered:revisit; newest_capture: it also counts as "
        "a capture of its URL when the newest capture is chosen (url_dedup).",
    )
    url_dedup: bool = Field(True, description="Keep only the newest capture of each normalized URL in the source.")
    split_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Files are read in byte ranges of this size by separate workers (does not change the output).",
    )

    @field_validator("content_types")
    @classmethod
    def _lowercase(cls, value: list[str]) -> list[str]:
        cleaned = [v.strip().lower() for v in value]
        if not cleaned or not all(cleaned):
            raise ValueError("list at least one media type, e.g. text/html")
        return cleaned
