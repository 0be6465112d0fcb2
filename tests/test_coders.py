"""Every grouping key in every stage's job has a deterministic, non-pickling coder, and no
grouping or Flatten moves one record per document (they move spill file names or a few small records).

The graphs are those the driver assembles for each stage: over a copy of the
reference build every layer is complete, and ``assemble_reused=True`` hands
each stage's (unrun) pipeline to the hook, exactly as it would be run.
"""
import shutil

from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build import CorpusBuild
from beam_pipeline.config import load_config
from conftest import IN_PROCESS, SAMPLE_CONFIG, grouping_key_coders, unexplained_flattens, \
    unexplained_groupings

ALLOWED_KEY_CODERS = (coders.StrUtf8Coder, coders.VarIntCoder, coders.BytesCoder)


def test_grouping_keys_use_deterministic_coders(built, tmp_path):
    seen, flattens = {}, []

    def record(stage, pipeline):
        seen.update({f"{stage}: {name}": coder for name, coder in grouping_key_coders(pipeline).items()})
        flattens.extend(f"{stage}: {name}" for name in unexplained_flattens(pipeline))

    root = str(tmp_path / "out")
    shutil.copytree(built["root"], root)
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": root})
    CorpusBuild(config, PipelineOptions(IN_PROCESS), snapshot_id=built["manifest"]["snapshot_id"],
                log=lambda m: None, before_run=record, assemble_reused=True).run()
    assert {name.split(":")[0] for name in seen} == {"ingest", "exact_dedup", "near_dedup", "select", "tokenize",
                                                     "language", "heuristics", "blocklist", "quality", "safety",
                                                     "pii", "decontamination", "ngram_index"}
    ours = dict(seen)
    bad = {name: str(coder) for name, coder in ours.items()
           if not (isinstance(coder, ALLOWED_KEY_CODERS) and coder.is_deterministic())}
    assert bad == {}
    assert len(ours) >= 6
    # stage: transform name -> the transform name (the kinds in conftest.GROUPINGS match on it)
    assert unexplained_groupings(name.split(": ", 1)[1] for name in ours) == []
    assert flattens == []  # no Flatten joins per-document collections of two steps (conftest.FLATTENS)
