"""``python -m beam_pipeline``: see :mod:`beam_pipeline.cli.commands`."""

import sys

from beam_pipeline.cli.commands import main

sys.exit(main())
