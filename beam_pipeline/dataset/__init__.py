"""The consumer side of a built dataset: checks, exports and questions asked of it.

``docs/format.md`` is the contract these read. The training loader itself is
:mod:`beam_pipeline.dataset.loader` (its lane plan and state: :mod:`.lanes`; its
PyTorch adapter: :mod:`.torch_dataset`).

* :mod:`.verify`         recompute every digest and the Merkle root; name mismatches
* :mod:`.megatron`       export to the Megatron-LM indexed dataset (.bin/.idx, MMIDIDX)
* :mod:`.lineage`        the per-document lineage table and ``trace`` from a token back to its record
* :mod:`.takedown`       a new version without given documents, rebuilding only affected shards
* :mod:`.diff`           what differs between two dataset versions
* :mod:`.contamination`  evaluation-set overlap against a dataset's retained n-gram index
"""
