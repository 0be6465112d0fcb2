"""Records and their ids: the bottom layer every other package may use.

* ``record_types``  the raw record and the bad record (a dead letter's origin), field paths
* ``hashing``       every id and digest (no Python ``hash()``)
* ``normalize``     versioned text normalization
* ``accounting``    counters and the per-stage record balance
"""
