"""A stage of the build's job before it is added to the graph (:class:`StagePlan`), and its layer as later stages see it (:class:`LayerRef`).

:mod:`beam_pipeline.build.corpus_build` adds plans to its
:class:`~beam_pipeline.build.build_graph.BuildGraph`; the scoring cascade
(:mod:`beam_pipeline.scoring.cascade`) writes the plans of its
stages, so both use these types without importing each other.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from beam_pipeline.records.hashing import digest_json
from beam_pipeline.storage.layers import Layer, join, part_name


@dataclasses.dataclass
class LayerRef:
    """A stage's layer as the later stages of the job see it: where it is, and when it is committed."""

    stage: str
    layer: Layer
    version: str
    config: Any
    partitions: int
    committed: Any  # PCollection of one Committed element, there once the layer is complete
    reused: bool

    @property
    def key(self) -> str:
        return self.layer.key

    @property
    def config_digest(self) -> str:
        return digest_json(self.config)

    def part_paths(self, output: str) -> list[str]:
        """The partitions of an output (their names do not depend on whether the layer is reused)."""
        return [join(self.layer.output_path(output), part_name(i, self.partitions)) for i in range(self.partitions)]


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """One layer of the build, before it is added to the graph."""

    stage: str
    version: str
    config: Any
    inputs: dict  # input name -> LayerRef of this build, or a key (snapshot id, earlier layers)
    outputs: dict  # output name -> schema
    rows_match: dict = dataclasses.field(default_factory=dict)
    finalize: Callable[[Layer, int], dict] | None = None

    def input_keys(self) -> dict[str, str]:
        return {name: value.key if isinstance(value, LayerRef) else value for name, value in self.inputs.items()}

    def after(self) -> list:
        """The Committed collections of the input layers of this build (what the stage waits for)."""
        return [value.committed for value in self.inputs.values() if isinstance(value, LayerRef)]
