#!/usr/bin/env python3
"""Web archives end to end: the whole cascade on re-crawls with 2, 4 and 6 captures per URL.

Part of ``make bench``; alone: ``make bench-web-scale`` (=
``.venv/bin/python bench/bench_web_scale.py [--rounds 2 4 6]``).

The scale corpus of ``bench_scale.py`` is JSONL; this run measures the web
path at growing size. The pages are bench_warc.py's: every HTML page of the
pinned Debian documentation packages (~7,100 pages), written as WARC
``request`` + ``response`` records, one capture *round* per month
(``bench_warc.build_warc(rounds=N)``, cached under
``bench/work/web-scale/crawl-<N>/``). Every round captures every page again,
so the crawl grows with N while the documents after the newest capture per
URL stay the same: the older captures are dropped in ingest (the runner's
``CoGroupByKey`` on the URL key: ``beam_pipeline/transforms/web_archives.py``), and the
later stages see the same corpus at every N.

Each crawl is built as a user builds it (``bench_scale.run_one``: ``python -m
beam_pipeline run`` in a child process, one Beam job; ``--runner local``:
DirectRunner, ``multi_processing``, 2 workers; ``--runner flink``: embedded
Flink; a fresh output root), with the scale corpus's stage settings (near
dedup, the seven scorers, policy rules, redaction, 13-gram index,
tokenize/pack/shard) and the web source in place of the JSONL ones. The
sampler attributes memory to phases as in bench_scale (a stage's phase: from
the commit of the stages before it to its own commit).

Results: ``bench/results/web-scale-<YYYYMMDD>.json`` and ``.md``. MB = 10^6
bytes of the stored (gzip) WARC.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORK = BENCH / "work" / "web-scale"
RESULTS = BENCH / "results"
ROUNDS = (2, 4, 6)
MB = 1e6

sys.path.insert(0, str(BENCH))
import bench_scale  # noqa: E402
import bench_warc  # noqa: E402
import build_corpus  # noqa: E402

#: The web source in place of the scale config's JSONL sources (32 MB splits: several per crawl).
WEB_SOURCES = """\
sources:
  - name: crawl
    uri: crawl.warc.gz
    format: warc
    rank: 5
    license: debian-packages
    domain: web
    extract: {split_bytes: 33554432}

"""


def log(msg: str) -> None:
    print(f"[bench_web_scale] {msg}", flush=True)


def web_config() -> str:
    """The scale corpus's config with the crawl as its only source."""
    text = build_corpus.SCALE_CONFIG_TEMPLATE.format(primary=build_corpus.PRIMARY, mirror=build_corpus.MIRROR,
                                                     tokenizer=build_corpus.TOKENIZER, sample=build_corpus.SAMPLE)
    text, replaced = re.subn(r"^sources:\n.*?(?=^ingest:)", WEB_SOURCES, text, count=1, flags=re.S | re.M)
    if not replaced:
        raise SystemExit("bench/build_corpus.py's SCALE_CONFIG_TEMPLATE has no sources block before ingest:")
    return text.replace("name: bench-scale", "name: bench-web-scale").replace(
        "# Scale corpus written by bench/build_corpus.py --scale", "# Web crawl config written by bench/bench_web_scale.py")


def ensure_crawl(rounds: int) -> tuple[Path, dict]:
    folder = WORK / f"crawl-{rounds}"
    _, info = bench_warc.build_warc(0, work=folder, rounds=rounds)
    config = folder / "corpus.yaml"
    config.write_text(web_config())
    return config, info


def stage(run: dict, name: str) -> dict:
    return next(s for s in run["stages"] if s["stage"] == name)


def markdown(result: dict) -> str:
    runs = result["runs"]
    lines = [
        f"# Web archives end to end ({result['date']})", "",
        f"`{result['command']}` on {result['machine']}. {result['crawl']} "
        f"{result.get('runner_description') or bench_scale.runner_description('local')}; the scale corpus's stages. "
        "MB = 10^6 bytes of stored WARC.", "",
        "| captures per URL | WARC MB | response records | documents | older captures dropped | partitions "
        "| largest partition (Parquet MB) | ingest s | build s | ingest s per MB | ingest worker peak MB "
        "| ingest driver RSS MB | worker peak MB (build) | driver peak MB (build) | slowest stage | others' load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in runs:
        ingest = stage(r, "ingest")
        lines.append(
            f"| {r['rounds']} | {r['text_bytes'] / MB:.0f} | {r['records'] // 2:,} | {ingest['passed']:,} | "
            f"{ingest['counts']['filtered'].get('older_capture', 0):,} | {r['partitions']} | "
            f"{r['largest_partition_parquet_mb']:.1f} | {ingest['seconds']:.0f} | "
            f"{r['build_seconds']:.0f} | {ingest['seconds'] / (r['text_bytes'] / MB):.2f} | "
            f"{bench_scale._mb(ingest['worker_peak_mb'])} | {bench_scale._mb(ingest['driver_rss_mb'])} | "
            f"{r['worker_peak_mb']:.0f} | "
            f"{r['driver_peak_mb']:.0f} | {r['slowest_stage']} | {r['others_share']:.0%} |")
    lines += ["", "The older captures of a URL are dropped in ingest by the runner's CoGroupByKey on the URL "
              "key; on the local runner the driver process holds that shuffle, so the ingest driver column grows "
              "with the crawl there (on Flink, the JVM sorts and spills it). The later stages see the same "
              "documents at every size, in more partitions: the partition count is planned before ingest from "
              "the input's size (a compressed file counted 4x), and a re-crawl's older captures and markup are "
              "dropped there, so a crawl's partitions come out far below `layout.target_partition_bytes`. A "
              "stage's seconds and memory are its phase's: from the commit of the stages before it to its own "
              "commit (bench_scale.Phases).", ""]
    lines += bench_scale.per_stage_by_size("Stage seconds at each WARC size", runs,
                                           lambda r, st: bench_scale._s(st["seconds"]))
    lines += bench_scale.per_stage_by_size("Worker peak MB per stage at each WARC size", runs,
                                           lambda r, st: bench_scale._mb(st["worker_peak_mb"]))
    lines += bench_scale.per_stage_by_size("Driver RSS MB per stage at each WARC size", runs,
                                           lambda r, st: bench_scale._mb(st["driver_rss_mb"]))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=list(ROUNDS), help="captures per URL, one build each")
    parser.add_argument("--runner", default="local", choices=["local", "flink"],
                        help="local: DirectRunner, multi_processing, 2 workers; flink: embedded Flink (bench_scale.py)")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md of an earlier results .json")
    args = parser.parse_args()
    if args.render:
        Path(args.render).with_suffix(".md").write_text(markdown(json.loads(Path(args.render).read_text())))
        return 0
    date = datetime.date.today().strftime("%Y%m%d") + ("" if args.runner == "local" else f"-{args.runner}")
    runs, crawl = [], ""
    for rounds in sorted(args.rounds):
        config, info = ensure_crawl(rounds)
        crawl = (f"Crawl: {info['pages']:,} real HTML pages ({info['html_bytes'] / info['rounds'] / MB:.0f} MB of "
                 "HTML per round), every page captured once per round.")
        log(f"{rounds} rounds: {info['bytes'] / MB:.0f} MB, {info['responses']:,} responses")
        run = bench_scale.run_one(round(info["bytes"] / MB), config, info["bytes"], info["records"], label="web",
                                 runner=args.runner)
        runs.append({**run, "rounds": rounds})
        result = {"date": date, "command": f"make bench-web-scale (bench/bench_web_scale.py --runner {args.runner} "
                  "--rounds " + " ".join(map(str, args.rounds)) + ")", "runner": args.runner,
                  "runner_description": bench_scale.runner_description(args.runner),
                  "machine": f"{os.cpu_count()} cores, {platform.python_version()}, {platform.machine()}",
                  "crawl": crawl, "runs": runs}
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"web-scale-{date}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        (RESULTS / f"web-scale-{date}.md").write_text(markdown(result))
    log(f"results in bench/results/web-scale-{date}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
