"""The corpus config: one YAML file, validated on load (docs/config.md).

* ``corpus``   :class:`~beam_pipeline.config.corpus.CorpusConfig`, ``load_config``, ``parse_config``
* ``scorers``  the scorer stages' sections (language, quality, safety, PII, ...)
* ``extract``  web extraction (``format: warc`` sources)
* ``landing``  the landing job's section (arrivals)

A detector's or a rule's own section lives beside it (``dedup/config.py``,
``policy/config.py``) and is assembled here.
"""
