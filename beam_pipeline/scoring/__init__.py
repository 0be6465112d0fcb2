"""The scoring cascade: which scorer stages run, in what order, and re-selection.

The scorers are pure functions in :mod:`beam_pipeline.filters`, run as Beam
stages by :mod:`beam_pipeline.transforms.score`; the policy that turns their
scores into decisions is :mod:`beam_pipeline.policy.rules`.

* :mod:`.config`    the config sections of the scorers and the cascade, validated
* :mod:`.cascade`   runs the scorer stages in cascade order, each gated by the rules before it
* :mod:`.commands`  ``select`` (re-select without rescoring), ``train-quality``, ``contamination-report``
"""
