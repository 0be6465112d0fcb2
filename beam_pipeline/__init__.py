"""beam_pipeline: raw text in, deterministic provenance-tracked token shards out.

Where things are:

* ``cli``         the ``python -m beam_pipeline`` commands
* ``config``      the corpus YAML schema and its validation
* ``build``       the stage graph, layers and resume
* ``snapshot``    immutable input manifests
* ``layers``      layer keys, atomic writes, ledgers
* ``readers``     per-record file readers (JSONL, Parquet, text)
* ``normalize``   versioned text normalization
* ``policy``      the keep/drop decision
* ``manifest``    dataset manifests and the dataset id
* ``accounting``  counters and the per-stage record balance
* ``hashing``     every id and digest
* ``transforms/`` one module per stage: composite PTransforms
* ``options/``    PipelineOptions subclasses
"""

__version__ = "0.1.0"

from beam_pipeline import fast_exit as _fast_exit  # noqa: E402  (after the version: nothing else is imported)

_fast_exit.install_in_sdk_workers()
if _fast_exit.is_sdk_worker():  # a failed bundle's traceback: logged (to the runner), not printed on stderr
    from beam_pipeline.console import quiet_worker_tracebacks as _quiet

    _quiet()
