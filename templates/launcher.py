"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE in templates/Dockerfile).

Builds the corpus build's one Dataflow job, submits it and exits without
waiting for it; see beam_pipeline/build/launcher.py and docs/dataflow.md.
"""
import sys

from beam_pipeline.build.launcher import main

if __name__ == "__main__":
    sys.exit(main())
