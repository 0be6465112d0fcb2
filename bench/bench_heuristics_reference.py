#!/usr/bin/env python3
"""CPU cost of the heuristics' definitions per document: before this change, the project's, the reference's.

What is timed, per document, in CPU seconds of one process pinned to one core
(``time.process_time``; other load on the shared machine does not count, and
the lowest of ``--repeat`` fresh processes is kept):

* ``before``: ``heuristics.score`` as it was before the reference definitions
  (the file at ``--base``, default ``HEAD~{n}`` of the commit that added them,
  read with ``git show``), on every document;
* ``project``: ``heuristics.score(..., definitions=("project",))`` now (the
  same columns as before);
* ``reference``: ``heuristics.score(..., definitions=("reference",))`` (the
  ``ref_*`` columns, datatrove's definitions);
* ``both``: what the ``heuristics`` stage computes when a policy reads ``ref_*`` columns
  (``heuristics.definitions`` then defaults to both; otherwise to ``project``).

Each variant runs in a fresh interpreter, so the reference tokenizer's chunk
cache starts empty: the first pass (``cold``) pays for tokenizing every
distinct chunk once, as a worker does at its start; the second pass over the
same documents (``warm``) is what a worker pays per document once its cache
knows the corpus's vocabulary.

Corpora: the bundled sample (815 documents, 17 MB: Python docs, Wikipedia,
Debian copyright files), the reference comparison's 5,415 documents (the
sample and 4,600 pages of Debian documentation packages,
``tests/fixtures/heuristics_reference``), and ``stream``: the 20,254 unique
pages (99.5 MB) of the bench corpus (``bench/build_corpus.py``, its
``debian-docs`` source), scored once in file order. ``stream`` is what a
worker pays per document over a partition of new text: its vocabulary keeps
growing, so chunks the tokenizer has not seen keep arriving, which a second
pass over the same documents (``warm``) never shows. Its table has one
column pair (the one pass).

Usage:  .venv/bin/python bench/bench_heuristics_reference.py [--repeat 3] [--base <git rev>] [--out bench/results]
                                                            [--suffix after]
Writes ``heuristics-reference-<YYYYMMDD>[-<suffix>].json`` and ``.md`` to ``--out``; the tables give the
lowest of the ``--repeat`` processes, and the median in brackets.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("before", "project", "reference", "both")
DEFAULT_BASE = "1d4bd26"   # main when the reference definitions were added (beam_pipeline/filters/heuristics.py)

_CHILD = r"""
import importlib.util, json, os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
sys.path.insert(0, %(repo)r)
from tests.helpers import reference_fixture
corpus, variant, before_path = sys.argv[1], sys.argv[2], sys.argv[3]
if corpus == "stream":  # the bench corpus's unique pages, in file order: a partition's worth of new text
    import glob, zstandard
    texts = []
    for path in sorted(glob.glob(os.path.join(%(repo)r, "bench", "work", "corpus", "debian-docs", "*.jsonl.zst"))):
        with open(path, "rb") as f:
            texts.extend(json.loads(line)["text"] for line in zstandard.ZstdDecompressor().stream_reader(f).read().splitlines())
else:
    documents = reference_fixture.sample_documents() if corpus == "sample" else reference_fixture.documents()
    texts = [d["text"] for d in documents]
if variant == "before":
    spec = importlib.util.spec_from_file_location("heuristics_before", before_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    score = lambda text: module.score(text, "en")
else:
    from beam_pipeline.filters import heuristics
    definitions = {"project": ("project",), "reference": ("reference",), "both": ("project", "reference")}[variant]
    score = lambda text: heuristics.score(text, "en", definitions=definitions)
passes = []
for _ in range(1 if corpus == "stream" else 2):
    start = time.process_time()
    for text in texts:
        score(text)
    passes.append(time.process_time() - start)
print(json.dumps({"documents": len(texts), "chars": sum(map(len, texts)),
                  "bytes": sum(len(t.encode("utf-8")) for t in texts), "cold": passes[0], "warm": passes[-1]}))
"""


def run_variant(corpus: str, variant: str, before_path: str) -> dict:
    code = _CHILD % {"repo": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, corpus, variant, before_path], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default=DEFAULT_BASE, help="git revision whose heuristics.py is 'before'")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--corpora", default="sample,all,stream",
                        help="sample, all (the reference fixture), stream (needs bench/build_corpus.py's corpus)")
    parser.add_argument("--suffix", default="", help="appended to the results' file names (keeps earlier ones)")
    parser.add_argument("--markdown", metavar="JSON", help="only rewrite the .md of an earlier results .json")
    args = parser.parse_args()
    if args.markdown:
        Path(args.markdown).with_suffix(".md").write_text(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    before = subprocess.run(["git", "show", f"{args.base}:beam_pipeline/filters/heuristics.py"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    results: dict = {"date": datetime.date.today().isoformat(), "base": args.base, "repeat": args.repeat,
                     "python": platform.python_version(), "cores": os.cpu_count(),
                     "load_start": os.getloadavg(), "corpora": {},
                     "args": "".join(f" {arg}" for arg in sys.argv[1:])}
    with tempfile.TemporaryDirectory() as tmp:
        before_path = os.path.join(tmp, "heuristics_before.py")
        Path(before_path).write_text(before)
        for corpus in args.corpora.split(","):
            runs = {variant: [] for variant in VARIANTS}
            for _ in range(args.repeat):
                for variant in VARIANTS:      # interleaved, so a burst of load hits every variant alike
                    runs[variant].append(run_variant(corpus, variant, before_path))
                    print(corpus, variant, runs[variant][-1], flush=True)
            first = runs["before"][0]
            results["corpora"][corpus] = {
                "documents": first["documents"], "bytes": first["bytes"],
                "variants": {variant: {"cold": min(r["cold"] for r in rs), "warm": min(r["warm"] for r in rs),
                                       "cold_median": statistics.median(r["cold"] for r in rs),
                                       "warm_median": statistics.median(r["warm"] for r in rs),
                                       "runs": rs} for variant, rs in runs.items()}}
    results["load_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.date.today().strftime("%Y%m%d") + (f"-{args.suffix}" if args.suffix else "")
    (out / f"heuristics-reference-{stamp}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"heuristics-reference-{stamp}.md").write_text(markdown(results))
    print(markdown(results))
    return 0


def markdown(results: dict) -> str:
    lines = [f"# Heuristics definitions: CPU cost per document, {results['date']}", "",
             f"Host: {results['cores']} cores, Python {results['python']}; one process pinned to one core, "
             f"CPU seconds (`time.process_time`), lowest of {results['repeat']} fresh processes per variant, "
             "interleaved (the median in brackets, where kept) "
             f"(load average at start {results['load_start'][0]:.2f}, at end {results['load_end'][0]:.2f}). "
             f"`before` is `beam_pipeline/filters/heuristics.py` at {results['base']}. "
             f"Command: `.venv/bin/python bench/bench_heuristics_reference.py{results.get('args', '')}`.", ""]
    names = {"sample": "the bundled sample", "all": "sample + Debian pages (the reference comparison's documents)",
             "stream": "the bench corpus's unique pages, one pass in a fresh process (a partition of new text)"}
    for corpus, data in results["corpora"].items():
        before = data["variants"]["before"]
        lines += [f"## {names.get(corpus, corpus)}: {data['documents']:,} documents, "
                  f"{data['bytes'] / 1e6:.1f} MB", "",
                  "| definitions | cold: ms/doc | cold: MB/s | cold vs before | warm: ms/doc | warm: MB/s | "
                  "warm vs before |", "|---|---:|---:|---:|---:|---:|---:|"]
        phases = ("cold",) if corpus == "stream" else ("cold", "warm")
        if corpus == "stream":
            lines[-2:] = ["| definitions | ms/doc | MB/s | vs before |", "|---|---:|---:|---:|"]
        for variant, v in data["variants"].items():
            row = [variant]
            for phase in phases:
                seconds = v[phase]
                ms = f"{1000 * seconds / data['documents']:.2f}"
                ratio = f"{seconds / before[phase]:.2f}x"
                if f"{phase}_median" in v:  # results written before the medians were kept have none
                    median, before_median = v[f"{phase}_median"], before[f"{phase}_median"]
                    ms += f" ({1000 * median / data['documents']:.2f})"
                    ratio += f" ({median / before_median:.2f}x)"
                row += [ms, f"{data['bytes'] / 1e6 / seconds:.2f}", ratio]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += _rounds(data, phases[-1])
    lines += ["`project` computes the same columns as `before` (the heuristics stage's default); `reference` the "
              "`ref_*` columns; `both` is what the stage computes when a policy reads `ref_*` columns and "
              "`heuristics.definitions` is not set. Cold: the first pass "
              "in a fresh process (the reference tokenizer's chunk cache empty); warm: a second pass over the "
              "same documents. The stream's one pass is a worker's steady state on text it has not seen.", ""]
    return "\n".join(lines)


def _rounds(data: dict, phase: str) -> list[str]:
    """One line per variant: its ``phase`` CPU seconds over ``before``'s in each interleaved round (the
    processes run back to back), so that the spread of the ratio shows, not only the lowest and the median."""
    before = [run[phase] for run in data["variants"]["before"]["runs"]]
    if len(before) < 2:
        return []
    lines = [f"Per round ({phase} seconds over `before`'s of the same round):", ""]
    for variant, v in data["variants"].items():
        if variant != "before":
            ratios = [run[phase] / b for run, b in zip(v["runs"], before)]
            lines.append(f"* {variant}: " + ", ".join(f"{r:.2f}x" for r in ratios)
                         + f" (median {statistics.median(ratios):.2f}x, highest {max(ratios):.2f}x)")
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
