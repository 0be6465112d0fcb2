"""Near-duplicate detection building blocks: pure functions over numpy, no Beam.

The Beam stages that use them are :mod:`beam_pipeline.transforms.near_dedup`
and :mod:`beam_pipeline.transforms.line_dedup`; ``docs/near_dedup.md`` has
the reasoning and the numbers.

* :mod:`.shingling`    versioned text normalization and word/character shingles
* :mod:`.minhash`      MinHash signatures, LSH band keys, the S-curve and band choice
* :mod:`.simhash`      64-bit SimHash and its block keys
* :mod:`.components`   large-star / small-star steps of distributed connected components
* :mod:`.repetition`   boilerplate lines and repeated spans across documents
"""
