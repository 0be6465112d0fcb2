"""Where layers and datasets live, and how they are written (docs/format.md).

* ``layers``        layer keys, atomic writes, ledgers
* ``manifest``      dataset manifests and the dataset id
* ``schemas``       the Arrow schemas of every layer
* ``paths``         local paths and URIs, relative to a config's folder
* ``object_store``  S3-protocol stores: clients and checks
* ``runs``          the runs of an output root
* ``bronze``        the landing layer's object layout
* ``arrivals_log``  the log of what landed, in order
"""
