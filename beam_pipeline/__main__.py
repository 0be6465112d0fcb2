"""``python -m beam_pipeline``: see :mod:`beam_pipeline.cli`."""

import sys

from beam_pipeline.cli import main

sys.exit(main())
