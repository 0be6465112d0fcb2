#!/usr/bin/env python3
"""Benchmark of the scoring cascade: each scorer against its bare library call, and the
full cascade with gates against scoring every document.

Part 1, pure functions (no Beam), on the 815 documents (17 MB) of the bundled sample,
CPU time of this process (``time.process_time``, so other load on the machine does
not count), one core:

    scorer                    ours (beam_pipeline.filters)         bare library call, same text
    language (lid.176)        language.score (first 10k chars)     model.predict(whole text) / (10k prefix)
    quality (fastText)        quality_model.positive_probability   model.predict(prepared line)
    pii                       pii.counts (prefilters + validation) every detector regex over every text
    safety (LDNOOBW)          BadWords.score (token sets)          one boundary regex alternation (C4 style)
    decontamination           decontamination.score (13-grams)     xxh3 of every word only
    heuristics                heuristics.score                     (no library: Python + numpy)
    blocklist                 Blocklist.score per URL              urlsplit per URL

Part 2, the Beam stages: the sample config built twice into one fresh output root
(ingest and dedup layers shared), once with ``cascade.gate: true`` (each stage scores
only what passed the policy rules before it) and once with ``gate: false`` (every
stage scores every document). Per stage: documents scored, wall seconds, CPU seconds
of the driver process (the in-memory DirectRunner runs the job in it).

Usage:  .venv/bin/python bench/bench_filters.py [--skip-pipeline] [--out bench/results]
Writes ``filters-<YYYYMMDD>.json`` and ``.md`` to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def texts_of_sample() -> list[tuple[str, str | None]]:
    """(text, url) of every sample document, in a fixed order."""
    from train_tokenizer import iter_texts

    import pyarrow.parquet as pq

    texts = list(iter_texts(REPO / "sample"))
    urls = []
    for path in sorted((REPO / "sample" / "data" / "wikipedia").glob("*.parquet")):
        urls.extend(pq.read_table(path, columns=["url"]).column("url").to_pylist())
    urls = (urls * (len(texts) // max(1, len(urls)) + 1))[:len(texts)]
    return list(zip(texts, urls))


def rate(name: str, docs, fn, repeat: int = 1) -> dict:
    total_bytes = sum(len(t.encode("utf-8")) for t in docs)
    start = time.process_time()
    for _ in range(repeat):
        for item in docs:
            fn(item)
    seconds = (time.process_time() - start) / repeat
    return {"name": name, "docs": len(docs), "cpu_seconds": round(seconds, 3),
            "docs_per_s": round(len(docs) / seconds, 1), "mb_per_s": round(total_bytes / 1e6 / seconds, 2)}


def pure_functions() -> list[dict]:
    import xxhash

    from beam_pipeline.filters import (blocklist, decontamination, heuristics, language, pii, pii_numbers,
                                       quality_model, safety)

    docs = texts_of_sample()
    texts = [t for t, _ in docs]
    lid = language.load_model(language.builtin_lid_path())
    quality = language.load_model(str(REPO / "sample" / "models" / "quality.bin"))
    words = safety.BadWords(safety.load_word_lists())
    english = sorted({w.lower() for w in safety.builtin_words("en")}, key=lambda w: (-len(w), w))
    c4_regex = re.compile(r"(?:\W|^)({})(?:\W|$)".format("|".join(re.escape(w) for w in english)))
    evalset = decontamination.build_evalset(
        "passages", decontamination.read_items(str(REPO / "sample" / "evalsets" / "passages.jsonl")), 13)
    lists = blocklist.Blocklist.from_files([str(REPO / "sample" / "blocklists" / "domains.txt")],
                                           [str(REPO / "sample" / "blocklists" / "url_substrings.txt")])
    bare_pii = [pii._EMAIL, pii_numbers._NANP, pii_numbers._INTERNATIONAL, pii_numbers._IPV4,
                pii_numbers._IPV6_CANDIDATE, pii_numbers._CARD, pii_numbers._SSN,
                pii._IBAN] + [p for _, p in pii._SECRETS]
    cache: dict = {}
    rows = [
        ("language", rate("ours: language.score (max_chars 10000)", texts,
                          lambda t: language.score(lid, t, max_chars=10_000)),
         rate("bare: lid.176 predict, whole text", texts, lambda t: lid.predict(t.replace("\n", " "))),
         rate("bare: lid.176 predict, first 10000 chars", texts,
              lambda t: lid.predict(t[:10_000].replace("\n", " ")))),
        ("quality", rate("ours: positive_probability", texts, lambda t: quality_model.positive_probability(quality, t)),
         rate("bare: fastText predict, prepared line", [quality_model.prepare(t) for t in texts],
              lambda line: quality.predict(line, k=2))),
        ("pii", rate("ours: pii.counts (7 kinds)", texts, pii.counts),
         rate("bare: 15 detector regexes, no prefilter", texts,
              lambda t: [sum(1 for _ in p.finditer(t)) for p in bare_pii])),
        ("safety", rate("ours: BadWords.score (en)", texts, lambda t: words.score(t, "en")),
         rate("bare: one boundary alternation regex (en)", texts, lambda t: sum(1 for _ in c4_regex.finditer(t.lower())))),
        ("decontamination", rate("ours: 13-gram overlap with the eval set", texts,
                                 lambda t: decontamination.score([evalset], t, 13, 1, cache)),
         rate("bare: xxh3 of every word", texts,
              lambda t: [xxhash.xxh3_64_intdigest(w.encode()) for w in decontamination.words(t)])),
        ("heuristics", rate("ours: heuristics.score (all 32 columns)", texts, lambda t: heuristics.score(t, "en")),
         rate("of which Gopher repetition", texts, lambda t: heuristics.gopher_repetition(t, "en"))),
    ]
    urls = [u for _, u in docs] * 20
    from urllib.parse import urlsplit

    start = time.process_time()
    for u in urls:
        lists.score(u)
    ours = time.process_time() - start
    start = time.process_time()
    for u in urls:
        urlsplit(u)
    bare = time.process_time() - start
    rows.append(("blocklist", {"name": "ours: Blocklist.score per URL", "docs": len(urls), "cpu_seconds": round(ours, 3),
                               "docs_per_s": round(len(urls) / ours, 1), "mb_per_s": None},
                 {"name": "bare: urlsplit per URL", "docs": len(urls), "cpu_seconds": round(bare, 3),
                  "docs_per_s": round(len(urls) / bare, 1), "mb_per_s": None}))
    return [{"scorer": scorer, "measurements": list(measurements)} for scorer, *measurements in rows]


def pipeline_runs() -> dict:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.corpus_build import CorpusBuild
    from beam_pipeline.config.corpus import load_config

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = load_config(str(REPO / "sample" / "corpus.yaml"))
        for gate in (True, False):
            config = base.model_copy(update={"output_root": tmp,
                                             "cascade": base.cascade.model_copy(update={"gate": gate})})
            marks: dict[str, list[float]] = {}

            def log(message: str) -> None:
                found = re.match(r"\[(\w+)\] (running|done)", message)
                if found:
                    marks.setdefault(found.group(1), []).append(time.process_time())

            build = CorpusBuild(config, PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"]),
                                log=log)
            started = time.monotonic()
            result = build.run()
            stages = []
            for s in result.stages:
                cpu = marks.get(s.stage, [])
                stages.append({"stage": s.stage, "reused": s.reused, "in": s.counts["in"],
                               "scored": s.counts["passed"], "stopped": sum(s.counts["filtered"].values()),
                               "wall_seconds": round(s.seconds, 2),
                               "cpu_seconds": round(cpu[1] - cpu[0], 2) if len(cpu) == 2 else None})
            results["gated" if gate else "score_everything"] = {
                "dataset_id": result.dataset_id, "wall_seconds": round(time.monotonic() - started, 1), "stages": stages}
    return results


def markdown(report: dict) -> str:
    lines = [f"# Scorer benchmark, {report['date']}", "",
             f"Host: {report['host']['cores']} cores, Python {report['host']['python']}. "
             "CPU seconds of one process (other load on the machine does not count).", "",
             "## Scorers against the bare library call (815 sample documents, 17 MB)", "",
             "| scorer | what | docs/s/core | MB/s/core |", "|---|---|---:|---:|"]
    for row in report["pure"]:
        for m in row["measurements"]:
            lines.append(f"| {row['scorer']} | {m['name']} | {m['docs_per_s']:,.0f} | "
                         f"{m['mb_per_s'] if m['mb_per_s'] is not None else '-'} |")
    if report.get("pipeline"):
        lines += ["", "## Full cascade (gates on) against scoring every document (gates off)", "",
                  "| stage | scored, gated | scored, everything | CPU s, gated | CPU s, everything | wall s, gated | "
                  "wall s, everything |", "|---|---:|---:|---:|---:|---:|---:|"]
        gated = {s["stage"]: s for s in report["pipeline"]["gated"]["stages"]}
        everything = {s["stage"]: s for s in report["pipeline"]["score_everything"]["stages"]}
        for name, g in gated.items():
            e = everything.get(name, {})
            if g["reused"] and e.get("reused", True):
                continue
            lines.append(f"| {name} | {g['scored']} | {e.get('scored')} | {g['cpu_seconds']} | {e.get('cpu_seconds')} | "
                         f"{g['wall_seconds']} | {e.get('wall_seconds')} |")
        lines.append("")
        lines.append(f"Datasets: gated {report['pipeline']['gated']['dataset_id'][:16]}..., score everything "
                     f"{report['pipeline']['score_everything']['dataset_id'][:16]}... (equal: the gates only skip "
                     f"work whose result the policy ignores).")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-pipeline", action="store_true", help="only part 1 (pure functions)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    report = {"date": datetime.date.today().isoformat(),
              "host": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
              "pure": pure_functions()}
    print(markdown(report), flush=True)
    if not args.skip_pipeline:
        report["pipeline"] = pipeline_runs()
    text = markdown(report)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"filters-{report['date'].replace('-', '')}")
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
