"""Language identification with fastText's lid.176 model.

The model (``lid.176.ftz``, 176 languages, Joulin et al., "Bag of Tricks for
Efficient Text Classification", EACL 2017; license CC BY-SA 3.0) is data: it is
fetched once into the model cache and checked by sha256 before each load
(``beam_pipeline/filters/models.py``; ``python -m beam_pipeline.filters.models fetch``).

fastText classifies one line at a time, so newlines become spaces. Its cost
is linear in the text (~4 MB/s per core here for lid.176), so the document
label is taken from the first ``language.max_chars`` characters (default
10,000; 0 = all); paragraph mode, when on, still looks at every paragraph.
Scores are
rounded to 6 decimals: the float32 arithmetic of a model can differ in the
last bits between CPUs, and a layer must be the same bytes everywhere.

Per-paragraph mode adds how mixed a document is: the share of its characters
in paragraphs whose own top language is the document's, and the number of
distinct paragraph languages (paragraphs shorter than a minimum are too short
to classify and are skipped).
"""

from __future__ import annotations

from beam_pipeline.filters.paragraphs import split_paragraphs

BUILTIN_LID = "builtin:lid.176"
LABEL_PREFIX = "__label__"
DECIMALS = 6


def builtin_lid_path() -> str:
    """Path of ``lid.176.ftz`` in the model cache, its sha256 checked (beam_pipeline/filters/models.py)."""
    from beam_pipeline.filters.models import lid_model_path

    return lid_model_path()


def model_path(configured: str) -> str:
    return builtin_lid_path() if configured == BUILTIN_LID else configured


def load_model(path: str):
    """Load a fastText model quietly (the binding prints a warning for old formats); a model on s3://,
    gs:// or any Beam filesystem is copied to this machine first (fastText reads local files only)."""
    import fasttext

    from beam_pipeline.storage.layers import local_copy

    fasttext.FastText.eprint = lambda *args, **kwargs: None
    return fasttext.load_model(local_copy(path))


def one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def identify(model, text: str, max_chars: int = 0) -> tuple[str | None, float | None]:
    """(top language code, its probability) of the first ``max_chars`` characters (0: all),
    or (None, None) for empty text."""
    line = one_line(text[:max_chars] if max_chars else text).strip()
    if not line:
        return None, None
    labels, probabilities = model.predict(line, k=1)
    if not labels:
        return None, None
    # softmax in float32 can exceed 1 by a few ulps
    return labels[0][len(LABEL_PREFIX) :], round(min(1.0, max(0.0, float(probabilities[0]))), DECIMALS)


def identify_paragraphs(model, text: str, language: str | None, min_chars: int = 40) -> tuple[float | None, int | None]:
    """(share of characters in paragraphs of ``language``, distinct paragraph languages)."""
    paragraphs = [p for p in split_paragraphs(text) if len(p) >= min_chars]
    if not paragraphs or language is None:
        return None, None
    labels, _ = model.predict([one_line(p) for p in paragraphs], k=1)
    codes = [found[0][len(LABEL_PREFIX) :] if found else "" for found in labels]
    total = sum(len(p) for p in paragraphs)
    same = sum(len(p) for p, code in zip(paragraphs, codes) if code == language)
    return round(same / total, DECIMALS), len(set(codes))


def score(model, text: str, *, paragraphs: bool = False, min_paragraph_chars: int = 40, max_chars: int = 0) -> dict:
    """The ``language`` layer row (minus ids) for one document."""
    language, confidence = identify(model, text, max_chars)
    share, distinct = identify_paragraphs(model, text, language, min_paragraph_chars) if paragraphs else (None, None)
    return {"lang": language, "confidence": confidence, "paragraph_share": share, "paragraph_languages": distinct}
