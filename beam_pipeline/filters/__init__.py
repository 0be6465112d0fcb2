"""Pure scoring functions: text in, named scores out. No Beam, no I/O in the hot path.

One module per scorer family; the Beam stages that call them are in
:mod:`beam_pipeline.transforms.score`, the policy that turns their scores into
keep/drop decisions in :mod:`beam_pipeline.policy.rules`.

* :mod:`.heuristics`       Gopher quality and repetition, C4, FineWeb line rules (the project's definitions)
* :mod:`.heuristics_reference`  the same families as datatrove 0.10.1 defines them (``ref_*`` columns),
  with :mod:`.reference_tokenizer`, :mod:`.reference_affixes` and :mod:`.reference_sentencizer` (spaCy's
  English tokenizer and sentencizer, reproduced) and :mod:`.reference_rules` (their data, generated);
  :mod:`.presets` (the published rules as policy rules)
* :mod:`.language`         fastText language identification (lid.176)
* :mod:`.blocklist`        URL and domain block lists
* :mod:`.quality_model`    fastText classifiers: training and scoring
* :mod:`.safety`           bad-word ratio per language (LDNOOBW lists)
* :mod:`.pii`              PII detection and redaction (with :mod:`.pii_numbers`: phones, IPs, cards, SSNs)
* :mod:`.decontamination`  n-gram overlap with evaluation sets

A score that cannot be computed (no words, unknown language for a
language-specific rule) is ``None``, never a made-up number.
"""
