"""The command line: ``python -m beam_pipeline <command>`` (and ``beam-pipeline``).

* ``commands``      the argument parser and every command's entry (``main``)
* ``usage``         one-line user errors: unknown options, bad runners, config paths
* ``console``       what a build prints and logs (run logs, quiet SDK workers)
* ``interrupt``     Ctrl-C: one line, exit 130, the job cancelled
* ``fast_exit``     ending the process without waiting for Beam's threads
* ``full_disk``     a full disk: one line naming the stage and the folder
* ``dead_letters``  the ``dead-letters`` command
* ``arrivals``      the ``land`` and ``bronze`` commands
* ``scoring``       ``select`` (re-apply a policy), ``train-quality``, ``contamination-report``

The top layer (docs/layout.md): it imports the build and everything below;
nothing imports it.
"""
