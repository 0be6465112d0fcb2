"""The project's options as Dataflow Flex Template parameters.

``templates/metadata.json`` lists one parameter per option of the classes in
:data:`TEMPLATE_OPTION_CLASSES`, with the same name, help text, regexes and
optionality. This module derives that list from the argparse definitions, so
``tests/test_flex_template.py`` can compare it with the file, and
``python -m beam_pipeline.options.template_params`` prints the metadata to
paste after changing an option.

An option contributes to the metadata through:

* ``help``            -> ``helpText``;
* every parameter is a string on the command line -> ``paramType: TEXT`` (the
  other types are GCS pickers, and a build may read S3 or HDFS);
* ``type=Matching(...)`` (``options/validation.py``), an argparse type that also enforces the regex on
  the command line -> ``regexes``;
* the class's ``REQUIRED`` tuple (the CLI or launcher refuses to run without
  these; argparse ``required=True`` cannot be used because Beam parses every
  ``PipelineOptions`` subclass for every pipeline) -> ``isOptional: false``.
"""

from __future__ import annotations

import argparse
import json


def option_parameters(option_class) -> list[dict]:
    """Flex Template parameters of one ``PipelineOptions`` subclass, in definition order."""
    parser = argparse.ArgumentParser(add_help=False)
    option_class._add_argparse_args(parser)
    required = set(getattr(option_class, "REQUIRED", ()))
    params = []
    for action in parser._actions:
        name = action.dest
        param = {
            "name": name,
            "label": name.replace("_", " ").capitalize(),
            "helpText": action.help,
            "isOptional": name not in required,
            "paramType": "TEXT",
        }
        regex = getattr(action.type, "regex", None)  # a Matching type
        if regex:
            param["regexes"] = [regex]
        params.append(param)
    return params


def template_parameters() -> list[dict]:
    from beam_pipeline.options import TEMPLATE_OPTION_CLASSES

    return [p for option_class in TEMPLATE_OPTION_CLASSES for p in option_parameters(option_class)]


def template_metadata() -> dict:
    return {
        "name": "beam_pipeline corpus build",
        "description": "Build an LLM pretraining corpus (every stage, token shards, lineage, run report) "
        "with beam_pipeline as one Dataflow job, resuming from the layers an earlier launch "
        "committed. See docs/dataflow.md.",
        "streaming": False,
        "parameters": template_parameters(),
    }


if __name__ == "__main__":
    print(json.dumps(template_metadata(), indent=2))
