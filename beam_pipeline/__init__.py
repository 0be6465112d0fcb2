"""beam_pipeline: raw text in, deterministic provenance-tracked token shards out.

The packages, top layer first (docs/layout.md has the diagram; imports only
flow down, ``tests/test_structure.py`` checks it):

* ``cli/``         the ``python -m beam_pipeline`` commands
* ``build/``       one build: the stage graph, layers, resume, the Flex Template launcher
* ``scoring/``     the scoring cascade (which scorer stages run, re-selection)
* ``dataset/``     the consumer side: loader, verify, lineage, exports, takedowns
* ``transforms/``  one module per stage: composite PTransforms
* ``report/``      the run report
* ``arrivals/``    the landing job (files that keep arriving)
* ``sources/``     snapshots, readers, documents
* ``web/``         WARC, WET and ARC records to text
* ``options/``     PipelineOptions subclasses
* ``config/``      the corpus YAML schema and its validation
* ``policy/``      the keep/drop decision and the rule language
* ``filters/``     pure scoring functions (language, quality, safety, PII, ...)
* ``dedup/``       exact and near-duplicate building blocks (MinHash, SimHash, components)
* ``storage/``     layers, manifests, schemas, paths, object stores
* ``records/``     records, ids and digests, normalization, accounting
* ``errors``       the exit codes and the one error a user sees
"""

__version__ = "0.1.0"

from beam_pipeline.cli import fast_exit as _fast_exit  # noqa: E402  (after the version: nothing else is imported)

_fast_exit.install_in_sdk_workers()
if _fast_exit.is_sdk_worker():  # a failed bundle's traceback: logged (to the runner), not printed on stderr
    from beam_pipeline.cli.console import quiet_worker_tracebacks as _quiet

    _quiet()
