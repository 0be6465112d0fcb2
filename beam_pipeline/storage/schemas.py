"""Arrow schemas of every layer: the one definition of each record.

Rows travel through Beam as plain dicts with exactly these fields (values are
str, int, bool, bytes or None, so the coders are fast and deterministic) and
are written to Parquet under these schemas. ``docs/format.md`` describes them
for readers outside the pipeline.
"""

from __future__ import annotations

import pyarrow as pa

#: ingest -> ``documents``: normalized text with its provenance.
DOCUMENT = pa.schema(
    [
        ("doc_id", pa.string()),  # blake2b-128(source, normalized text)
        ("content_hash", pa.string()),  # xxh3-128(normalized text): exact-dedup key
        ("source", pa.string()),
        ("domain", pa.string()),
        ("source_rank", pa.int32()),
        ("license", pa.string()),
        ("url", pa.string()),
        ("date", pa.string()),
        ("record_id", pa.string()),
        ("file", pa.string()),  # input file as listed in the snapshot
        ("position", pa.int64()),  # record index within the file
        ("byte_offset", pa.int64()),  # offset in the decompressed stream (null for Parquet)
        ("n_chars", pa.int64()),
        ("text", pa.string()),
    ]
)

#: ingest -> ``repeats``: verbatim repeats of a document within its source.
REPEAT = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("file", pa.string()),
        ("position", pa.int64()),
        ("byte_offset", pa.int64()),
        ("url", pa.string()),
    ]
)

#: exact_dedup -> ``annotations``: one row per document, nothing deleted.
EXACT_DEDUP = pa.schema(
    [
        ("doc_id", pa.string()),
        ("content_hash", pa.string()),
        ("duplicate_count", pa.int64()),  # documents sharing the content hash (1 = unique)
        ("representative", pa.string()),  # doc_id kept for this content
        ("is_duplicate", pa.bool_()),  # True for every member but the representative
    ]
)

#: near_dedup -> ``annotations``: one row per document, nothing deleted (docs/near_dedup.md).
NEAR_DEDUP = pa.schema(
    [
        ("doc_id", pa.string()),
        ("signed", pa.bool_()),  # False: too short to shingle (exact dedup only)
        ("cluster_id", pa.string()),  # smallest doc_id of the connected component; null when alone
        ("cluster_size", pa.int64()),  # members of the component, previous versions included (1 when alone)
        ("representative", pa.string()),  # doc_id kept for the cluster (the document itself when alone)
        ("is_duplicate", pa.bool_()),  # dropped by the near_duplicate rule
        ("large_cluster", pa.bool_()),  # above max_cluster_size: verified against the representative
        ("boilerplate_lines", pa.list_(pa.int64())),  # lines-v1 keys of this document's boilerplate lines
        ("repeated_spans", pa.list_(pa.struct([("start", pa.int64()), ("end", pa.int64())]))),  # chars to cut
    ]
)

#: near_dedup -> ``signatures``: the persisted signatures and band index (incremental dedup).
NEAR_SIGNATURE = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("source_rank", pa.int32()),
        ("date", pa.string()),
        ("minhash", pa.binary()),  # num_perm little-endian uint32 values (null for simhash only)
        ("band_keys", pa.list_(pa.int64())),  # one LSH key per band
        ("simhash", pa.uint64()),  # 64-bit fingerprint (null for minhash only)
        ("simhash_keys", pa.list_(pa.int64())),  # pigeonhole block keys
        ("shingles", pa.binary()),  # sorted distinct uint64 shingle hashes (verify: jaccard; two_tier exact)
        ("shingle_count", pa.int32()),  # distinct shingles signed (two_tier's containment estimate)
    ]
)

#: near_dedup -> ``large_clusters``: clusters above max_cluster_size, reported instead of collapsed.
LARGE_CLUSTER = pa.schema(
    [
        ("doc_id", pa.string()),  # the cluster's representative
        ("cluster_id", pa.string()),
        ("size", pa.int64()),
        ("sampled_members", pa.list_(pa.string())),  # deterministic sample (lowest hash of doc_id)
    ]
)

#: select -> ``decisions``: the policy's verdict on every document.
DECISION = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("kept", pa.bool_()),
        ("reason", pa.string()),  # null when kept
    ]
)

#: select -> ``gold``: the kept text, the durable artifact before tokenization.
GOLD = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("domain", pa.string()),
        ("license", pa.string()),
        ("url", pa.string()),
        ("text", pa.string()),
    ]
)

#: every stage -> ``dead_letter``: records a stage could not process, with origin.
DEAD_LETTER = pa.schema(
    [
        ("stage", pa.string()),
        ("source", pa.string()),
        ("file", pa.string()),
        ("position", pa.int64()),
        ("byte_offset", pa.int64()),
        ("doc_id", pa.string()),
        ("error", pa.string()),
        ("raw_prefix", pa.binary()),
    ]
)

#: tokenize -> per-shard index: where each document's tokens are.
SHARD_INDEX = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("token_start", pa.int64()),  # offset of the first token in the shard's token stream
        ("token_count", pa.int64()),  # document tokens, not counting the EOS that follows
    ]
)


# --- cascade scorers -> ``annotations``: one row per document the stage scored ----------
# (docs/filters.md: meaning of every column; a document a stage never saw has no row, and a
# score that is undefined for a document is null).


def _scores(*columns: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([("doc_id", pa.string()), ("source", pa.string()), *columns])


_F, _I, _B, _S = pa.float64(), pa.int64(), pa.bool_(), pa.string()
LANGUAGE = _scores(("lang", _S), ("confidence", _F), ("paragraph_share", _F), ("paragraph_languages", _I))
HEURISTICS = _scores(
    ("gopher_words", _I),
    ("gopher_mean_word_length", _F),
    ("gopher_hash_ratio", _F),
    ("gopher_ellipsis_ratio", _F),
    ("gopher_bullet_lines", _F),
    ("gopher_ellipsis_lines", _F),
    ("gopher_alpha_words", _F),
    ("gopher_stop_words", _I),
    ("rep_dup_line_frac", _F),
    ("rep_dup_line_char_frac", _F),
    ("rep_dup_para_frac", _F),
    ("rep_dup_para_char_frac", _F),
    ("rep_top_2gram", _F),
    ("rep_top_3gram", _F),
    ("rep_top_4gram", _F),
    ("rep_dup_5gram", _F),
    ("rep_dup_6gram", _F),
    ("rep_dup_7gram", _F),
    ("rep_dup_8gram", _F),
    ("rep_dup_9gram", _F),
    ("rep_dup_10gram", _F),
    ("c4_terminal_punct_lines", _F),
    ("c4_short_lines", _F),
    ("c4_javascript_lines", _I),
    ("c4_policy_lines", _I),
    ("c4_lorem_ipsum", _B),
    ("c4_curly_bracket", _B),
    ("c4_kept_lines", _I),
    ("fw_line_punct_ratio", _F),
    ("fw_short_line_ratio", _F),
    ("fw_dup_line_char_frac", _F),
    ("fw_newline_ratio", _F),
    # the reference definitions (ref_*: datatrove 0.10.1's filters; filters/heuristics_reference.py);
    # the columns above are the project's definitions (filters/heuristics.py). docs/filters.md
    ("ref_gopher_words", _I),
    ("ref_gopher_mean_word_length", _F),
    ("ref_gopher_hash_ratio", _F),
    ("ref_gopher_ellipsis_ratio", _F),
    ("ref_gopher_bullet_lines", _F),
    ("ref_gopher_ellipsis_lines", _F),
    ("ref_gopher_alpha_words", _F),
    ("ref_gopher_stop_words", _I),
    ("ref_rep_dup_line_frac", _F),
    ("ref_rep_dup_line_char_frac", _F),
    ("ref_rep_dup_para_frac", _F),
    ("ref_rep_dup_para_char_frac", _F),
    ("ref_rep_top_2gram", _F),
    ("ref_rep_top_3gram", _F),
    ("ref_rep_top_4gram", _F),
    ("ref_rep_dup_5gram", _F),
    ("ref_rep_dup_6gram", _F),
    ("ref_rep_dup_7gram", _F),
    ("ref_rep_dup_8gram", _F),
    ("ref_rep_dup_9gram", _F),
    ("ref_rep_dup_10gram", _F),
    ("ref_c4_sentences", _I),
    ("ref_c4_kept_lines", _I),
    ("ref_c4_lorem_ipsum", _B),
    ("ref_c4_curly_bracket", _B),
    ("ref_fw_line_punct_ratio", _F),
    ("ref_fw_short_line_ratio", _F),
    ("ref_fw_dup_line_char_frac", _F),
    ("ref_fw_newline_ratio", _F),
)
BLOCKLIST = _scores(("blocked", _B), ("match", _S))
QUALITY = _scores(("score", _F))
SAFETY = _scores(("badword_count", _I), ("badword_ratio", _F), ("badword_lang", _S), ("toxicity", _F))
PII = _scores(
    ("email", _I),
    ("phone", _I),
    ("ip", _I),
    ("credit_card", _I),
    ("ssn", _I),
    ("iban", _I),
    ("secret", _I),
    ("total", _I),
)
DECONTAMINATION = _scores(("contaminated", _B), ("evalsets", _S), ("ngrams", _I))
#: stage name -> schema of its ``annotations`` output (the layers policy rules can read).
SCORES = {
    "language": LANGUAGE,
    "heuristics": HEURISTICS,
    "blocklist": BLOCKLIST,
    "quality": QUALITY,
    "safety": SAFETY,
    "pii": PII,
    "decontamination": DECONTAMINATION,
}

#: ngram_index -> ``index``: the retained n-gram index of the gold text (decontamination of later eval sets).
NGRAM_INDEX = pa.schema(
    [
        ("ngram", pa.uint64()),  # 64-bit hash of a word n-gram (filters/decontamination.py)
        ("doc_id", pa.string()),  # a gold document containing it
    ]
)


def dead_letter_row(
    stage: str,
    *,
    source: str | None = None,
    file: str | None = None,
    position: int | None = None,
    byte_offset: int | None = None,
    doc_id: str | None = None,
    error: str,
    raw_prefix: bytes = b"",
) -> dict:
    """The one constructor of dead-letter rows, so every stage reports origin alike."""
    return {
        "stage": stage,
        "source": source,
        "file": file,
        "position": position,
        "byte_offset": byte_offset,
        "doc_id": doc_id,
        "error": error[:2000],
        "raw_prefix": raw_prefix[:256],
    }
