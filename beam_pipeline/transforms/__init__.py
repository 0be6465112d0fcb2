"""The stages: one module per stage, each a composite ``PTransform`` whose ``expand()`` reads like its data flow.

Stages (in the order a build runs them): ``ingest`` (with ``web_archives`` for
``format: warc``), ``exact_dedup``, ``near_dedup`` (with
``connected_components`` and ``line_dedup``), ``score`` (every scorer stage),
``select``, ``ngram_index``, ``tokenize_shard``, ``publish``. The pieces they
share: ``layer_io`` (reading and committing layers), ``keys``, ``blocks``,
``bundle_budget``, ``gate``, ``task_ledger``, ``stage_plan``.
"""
