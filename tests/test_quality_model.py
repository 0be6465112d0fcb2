"""fastText classifiers (filters/quality_model.py): deterministic training, metrics, scoring, the toxicity slot."""
import hashlib
import json
import os
import sys

import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.filters import quality_model as qm
from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "scripts"))


@pytest.fixture(scope="module")
def examples():
    from train_sample_models import examples as sample_examples

    positive, negative = sample_examples(__import__("pathlib").Path(REPO) / "sample")
    return positive[:400], negative[:400]


@pytest.fixture(scope="module")
def trained(examples, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("model") / "quality.bin")
    metrics = qm.train(*examples, out, qm.TrainParams(epoch=5, cutoff=2000))
    return out, metrics


def test_training_is_deterministic(examples, trained, tmp_path):
    out, metrics = trained
    again = qm.train(*examples, str(tmp_path / "again.bin"), qm.TrainParams(epoch=5, cutoff=2000))
    assert again["model_sha256"] == metrics["model_sha256"]
    assert open(out, "rb").read() == open(tmp_path / "again.bin", "rb").read()


def test_metrics_file(trained):
    out, metrics = trained
    written = json.load(open(qm.metrics_path(out)))
    assert written == metrics
    assert written["model_sha256"] == hashlib.sha256(open(out, "rb").read()).hexdigest()
    held = written["heldout"]
    assert held["examples"] == written["examples"]["heldout_positive"] + written["examples"]["heldout_negative"]
    assert held["roc_auc"] > 0.9 and 0 < held["f1"] <= 1
    assert written["params"]["seed"] == 0 and written["labels"]["positive"] == "__label__pos"


def test_scores_separate_prose_from_boilerplate(trained):
    model = qm.load_model(trained[0])
    prose = ("The aardwolf is a small, insectivorous mammal, native to East and Southern Africa. Unlike many of "
             "its relatives in the order Carnivora, the aardwolf does not hunt large animals.")
    legal = ("THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT "
             "LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.")
    assert qm.positive_probability(model, prose) > 0.5 > qm.positive_probability(model, legal)
    assert qm.positive_probability(model, "") is None
    assert qm.positive_probability(model, "   \n ") is None


def test_prepare_is_one_bounded_line():
    line = qm.prepare("Hello, World!\nSecond   line.", max_tokens=5)
    assert line == "hello , world ! second"
    assert "\n" not in qm.prepare("a\nb")


def test_split_is_by_hash_not_by_order():
    texts = [f"example number {i} with some words" for i in range(200)]
    train, held = qm.split_examples(texts, 0.2, seed=0)
    train2, held2 = qm.split_examples(list(reversed(texts)), 0.2, seed=0)
    assert (train, held) == (train2, held2)
    assert 20 < len(held) < 60


def test_cli_train_quality(tmp_path, capsys):
    for name, texts in (("pos", ["a fine paragraph of clear prose about animals"] * 3 +
                         [f"prose sentence number {i} about rivers and towns" for i in range(40)]),
                        ("neg", [f"copyright {i} all rights reserved warranty disclaimer" for i in range(40)])):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
    out = tmp_path / "m.bin"
    assert cli.main(["train-quality", "--positive", str(tmp_path / "pos.jsonl"), "--negative",
                     str(tmp_path / "neg.jsonl"), "--out", str(out), "--epoch", "3"]) == 0
    assert "held out" in capsys.readouterr().out
    assert out.exists() and (tmp_path / "m.bin.metrics.json").exists()
    (tmp_path / "bad.jsonl").write_text('{"txt": "no text field"}\n')
    assert cli.main(["train-quality", "--positive", str(tmp_path / "bad.jsonl"), "--negative",
                     str(tmp_path / "neg.jsonl"), "--out", str(out)]) == 2
    assert "bad.jsonl:1: expected a JSON object with a 'text'" in capsys.readouterr().err


def test_toxicity_slot_uses_a_model_trained_with_the_same_command(trained):
    """A classifier trained with train-quality plugs into safety.toxicity_model (here: one flagging
    license boilerplate, to test the mechanics with real text; no toxic data ships with the project)."""
    import yaml

    from beam_pipeline.config.corpus import parse_config
    from beam_pipeline.transforms.score import SafetyScorer

    data = yaml.safe_load(open(os.path.join(REPO, "sample", "corpus.yaml")))
    data["safety"] = {"toxicity_model": trained[0]}
    config = parse_config(data, base_dir=os.path.join(REPO, "sample"))
    scorer = SafetyScorer(config, cascade_before=("language",))
    state = scorer.load()
    row = scorer.score(state, {"text": "A clear sentence about rivers and towns."}, {"language": {"lang": "en"}})
    assert 0.0 <= row["toxicity"] <= 1.0 and row["badword_lang"] == "en"
    assert scorer.key_config()["toxicity_model_sha256"] == hashlib.sha256(open(trained[0], "rb").read()).hexdigest()
