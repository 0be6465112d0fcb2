"""fastText binary classifiers: the learned quality score and the toxicity/NSFW slot.

One command trains both kinds (``python -m beam_pipeline train-quality``):
positive and negative examples as JSONL files, a model and a metrics JSON
out. Labels are ``__label__pos`` and ``__label__neg``; the score of a
document is the model's probability of ``pos`` (for a quality model "looks
like the positives", for a toxicity model "is toxic").

Training is deterministic: examples are split into train and held-out by a
hash of their text (not by a random draw), written in hash order, and
fastText runs with one thread and a fixed seed (its SGD is lock-free
"Hogwild" across threads, so more threads give different weights each run).
The same inputs and parameters therefore give the same model bytes.

Text is prepared the same way for training and scoring (:func:`prepare`):
lower-cased, words and punctuation split apart, newlines removed, cut to the
first ``MAX_TOKENS`` tokens (classification cost is then bounded per
document; the beginning of a document is what the classifier sees).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Iterable

import numpy as np
import xxhash

from beam_pipeline.filters.language import load_model
from beam_pipeline.records.hashing import sha256_file

POSITIVE, NEGATIVE = "__label__pos", "__label__neg"
MAX_TOKENS = 1000
DECIMALS = 6
_TOKEN = re.compile(r"\w+|[^\w\s]")


def prepare(text: str, max_tokens: int = MAX_TOKENS) -> str:
    """One line of lower-cased tokens: the classifier's view of a document."""
    tokens = []
    # tokens are at most a few characters apart: lower-case only the part that can be reached
    for match in _TOKEN.finditer(text[: max_tokens * 32].lower()):
        tokens.append(match.group(0))
        if len(tokens) >= max_tokens:
            break
    return " ".join(tokens)


def positive_probability(model, text: str) -> float | None:
    """P(pos) for one document, rounded; None for text without tokens."""
    line = prepare(text)
    if not line:
        return None
    return round(min(max(_p_pos(model, line), 0.0), 1.0), DECIMALS)


# --- training -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainParams:
    dim: int = 16
    epoch: int = 15
    lr: float = 0.5
    word_ngrams: int = 2
    min_count: int = 2
    bucket: int = 50_000
    holdout: float = 0.2
    seed: int = 0
    quantize: bool = True
    cutoff: int = 0  # quantize: keep only this many words and n-grams (0: all)


def read_examples(path: str, field: str = "text") -> list[str]:
    """Texts of a JSONL file (one object per line, text in ``field``); blank texts skipped."""
    texts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)[field]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: expected a JSON object with a {field!r} string ({err})") from None
            if isinstance(value, str) and value.strip():
                texts.append(value)
    return texts


def split_examples(texts: Iterable[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held-out) by a seeded hash of the prepared text; each sorted by that hash."""
    keyed = sorted(
        {
            (xxhash.xxh3_64_intdigest(line.encode("utf-8"), seed=seed), line)
            for line in (prepare(t) for t in texts)
            if line
        }
    )
    cut = int(round(holdout * 1000))
    train = [line for h, line in keyed if h % 1000 >= cut]
    held = [line for h, line in keyed if h % 1000 < cut]
    return train, held


def train(positive: list[str], negative: list[str], out: str, params: TrainParams = TrainParams()) -> dict:
    """Train, save the model to ``out`` and return the held-out metrics (also written next to it)."""
    pos_train, pos_held = split_examples(positive, params.holdout, params.seed)
    neg_train, neg_held = split_examples(negative, params.holdout, params.seed)
    if not pos_train or not neg_train:
        raise ValueError(
            f"need training examples of both classes (got {len(pos_train)} positive, "
            f"{len(neg_train)} negative after the hold-out split)"
        )
    lines = sorted(
        [f"{POSITIVE} {t}" for t in pos_train] + [f"{NEGATIVE} {t}" for t in neg_train],
        key=lambda s: xxhash.xxh3_64_intdigest(s.encode("utf-8"), seed=params.seed),
    )
    directory = os.path.dirname(os.path.abspath(out))
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = os.path.join(tmp, "train.txt")
        with open(train_file, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        tmp_out = os.path.join(directory, f".tmp-{os.path.basename(out)}")
        # fastText's trainer keeps state across calls in one process (with fasttext-numpy2 0.10.4 a
        # second train_supervised in the same interpreter can fail with "Encountered NaN"), so every
        # training runs in a fresh, interpreter: the same inputs give the same bytes.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from beam_pipeline.filters.quality_model "
                "import _fit; _fit(sys.argv[1], sys.argv[2], sys.argv[3])",
                train_file,
                tmp_out,
                json.dumps(dataclasses.asdict(params)),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"fastText training failed: {done.stderr.strip()[-2000:]}")
        os.replace(tmp_out, out)
    model = load_model(out)
    metrics = {
        "model": os.path.basename(out),
        "model_sha256": sha256_file(out),
        "model_bytes": os.path.getsize(out),
        "labels": {"positive": POSITIVE, "negative": NEGATIVE},
        "params": dataclasses.asdict(params),
        "examples": {
            "train_positive": len(pos_train),
            "train_negative": len(neg_train),
            "heldout_positive": len(pos_held),
            "heldout_negative": len(neg_held),
        },
        "heldout": evaluate(model, pos_held, neg_held),
    }
    with open(metrics_path(out), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=1, sort_keys=True)
        f.write("\n")
    return metrics


def _fit(train_file: str, out: str, params_json: str) -> None:
    """Train and save one model (runs in a fresh interpreter, see :func:`train`)."""
    import fasttext

    params = json.loads(params_json)
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    model = fasttext.train_supervised(
        input=train_file,
        dim=params["dim"],
        epoch=params["epoch"],
        lr=params["lr"],
        wordNgrams=params["word_ngrams"],
        minCount=params["min_count"],
        bucket=params["bucket"],
        loss="softmax",
        thread=1,
        seed=params["seed"],
        verbose=0,
    )
    if params["quantize"]:
        model.quantize(
            input=train_file, qnorm=True, retrain=params["cutoff"] > 0, cutoff=params["cutoff"], thread=1, verbose=0
        )
    model.save_model(out)


def metrics_path(model_path: str) -> str:
    return model_path + ".metrics.json"


def evaluate(model, positive_lines: list[str], negative_lines: list[str]) -> dict:
    """Accuracy, precision, recall, F1 at 0.5 and ROC AUC on prepared lines."""
    if not positive_lines or not negative_lines:
        return {"note": "no held-out examples of one class; use a larger --holdout"}
    scores = np.array([_p_pos(model, t) for t in positive_lines + negative_lines])
    truth = np.array([1] * len(positive_lines) + [0] * len(negative_lines))
    predicted = scores >= 0.5
    tp = int(np.sum(predicted & (truth == 1)))
    fp = int(np.sum(predicted & (truth == 0)))
    fn = int(np.sum(~predicted & (truth == 1)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "examples": int(truth.size),
        "accuracy": round(float(np.mean(predicted == (truth == 1))), 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0,
        "roc_auc": round(roc_auc(scores, truth), 4),
    }


def roc_auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """Mann-Whitney AUC with average ranks for ties."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    n_pos, n_neg = int(truth.sum()), int((1 - truth).sum())
    return float((ranks[truth == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _p_pos(model, line: str) -> float:
    labels, probabilities = model.predict(line, k=2)
    for label, p in zip(labels, probabilities):
        if label == POSITIVE:
            return float(p)
    return 0.0
