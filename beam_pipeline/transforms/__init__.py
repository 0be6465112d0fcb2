"""The stages: one module per stage, each a composite ``PTransform`` whose ``expand()`` reads like its data flow.

Stages, in the order a build runs them, and the modules beside each:

* ``ingest`` (``web_archives`` for ``format: warc`` sources)
* ``exact_dedup``
* ``near_dedup``: ``near_dedup_params``, ``near_dedup_groups`` (group counts),
  ``near_dedup_signing``, ``near_dedup_blocks`` (keys and payloads in blocks),
  ``near_dedup_candidates``, ``near_dedup_verify``, ``near_dedup_clusters``,
  ``connected_components``, ``line_dedup``
* ``score`` (every scorer stage)
* ``select`` (``select_rules``, ``select_floors``)
* ``ngram_index``
* ``tokenize_shard``: ``token_encoder`` (which engine encodes), ``tokenizers_encoder``,
  ``tiktoken_encoder``, ``word_cache_encoder``, ``metaspace_encoder``, ``shard_stream``
* ``publish``: ``lineage`` (the lineage table's format and writer)

What they share: ``layer_io`` (reading and committing layers), ``stage_plan``, ``keys``,
``blocks``, ``bundle_budget``, ``gate``, ``task_ledger``.
"""
