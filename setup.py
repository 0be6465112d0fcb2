"""Packaging for beam_pipeline.

Also the ``--setup_file`` for Dataflow workers: workers install this package
and its core dependencies. requirements/runtime.txt pins them and their whole
closure exactly, with hashes (`make lock` compiles it from this list).
"""
import setuptools

setuptools.setup(
    name="beam_pipeline",
    version="0.1.0",
    description=(
        "Apache Beam pipeline that turns raw text into deterministic, "
        "provenance-tracked LLM pretraining token shards."
    ),
    packages=setuptools.find_packages(include=["beam_pipeline", "beam_pipeline.*"]),
    package_data={"beam_pipeline.report": ["templates/*.html"]},  # the report page's Jinja2 templates
    python_requires=">=3.11",
    install_requires=[
        "apache-beam[gcp,aws]==2.77.0",
        "pyarrow==25.0.1",
        "numpy==2.4.6",
        "fasttext-numpy2==0.10.4",
        "tokenizers==0.23.3",
        "tiktoken==0.14.0",  # the byte-level BPE fast path of the tokenize stage (transforms/token_encoder.py)
        "xxhash==4.1.0",
        "numba==0.68.1",  # the MinHash inner loop compiled (beam_pipeline/dedup/minhash.py; docs/decisions.md)
        "zstandard==0.25.0",
        "pydantic==2.14.4",
        "PyYAML==6.0.4",
        "glin-profanity==4.1.0",  # LDNOOBW word lists (data files only); lid.176: beam_pipeline/filters/models.py
        "matplotlib==3.11.2",  # run report plots (beam_pipeline/report)
        "Jinja2==3.1.6",  # run report page templates (beam_pipeline/report/templates)
        "FastWARC==2.0.0",  # web archives (beam_pipeline/web)
        "Resiliparse==2.0.0",
        "trafilatura==2.3.1",
        "phonenumbers==9.0.43",  # phone validation by Google's libphonenumber metadata (beam_pipeline/filters/phones.py)
    ],
    entry_points={
        "console_scripts": [
            "beam-pipeline=beam_pipeline.cli.commands:main",
            # the SDK workers' boot on a Flink cluster (--environment_type=PROCESS; docs/flink.md)
            "beam-pipeline-worker=beam_pipeline.options.sdk_worker:main",
        ]
    },
)
