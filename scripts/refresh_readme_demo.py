"""Refresh README.md's `make demo` output block from the log of a real demo build.

Stage code is part of every layer key (beam_pipeline/build/code_version.py), so a
change to a stage changes the keys README.md shows; tests/test_readme_figures.py
fails until they are refreshed. Run the demo build, then this script on its
console output:

    .venv/bin/python -m beam_pipeline run --config sample/corpus.yaml \
        --output_root /tmp/demo/out/demo > /tmp/demo.log 2>&1
    .venv/bin/python scripts/refresh_readme_demo.py /tmp/demo.log /tmp/demo/out/demo

Only the stage table, the summary lines and the ingest layer line are
replaced (the output root is rewritten to `out/demo`); the hand-picked
progress lines stay as they are.
"""
from __future__ import annotations

import re
import sys


def refresh(readme: str, log: str, output_root: str) -> str:
    log = log.replace(output_root.rstrip("/"), "out/demo")
    start = readme.index("prints what happened:")
    block = re.search(r"```\n(.*?)```", readme[start:], re.S)
    if block is None:
        raise SystemExit("README.md: no output block after 'prints what happened:'")
    old = block.group(1)
    table = log[log.index("\nstage ") + 1 :]
    ingest = re.search(r"\[ingest\] runs in this job -> (\S+)", log)
    new_lines = []
    for line in old.splitlines():
        if line.startswith("stage "):
            break
        if ingest and "[ingest] runs in this job ->" in line:
            line = re.sub(r"-> \S+", "-> " + ingest.group(1), line)
        new_lines.append(line)
    new = "\n".join(new_lines) + "\n" + table.rstrip("\n") + "\n"
    begin = start + block.start(1)
    return readme[:begin] + new + readme[begin + len(old) :]


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit("usage: refresh_readme_demo.py <demo console log> <output_root of that build>")
    log_path, output_root = argv[1], argv[2]
    with open("README.md", encoding="utf-8") as f:
        readme = f.read()
    with open(log_path, encoding="utf-8") as f:
        log = f.read()
    with open("README.md", "w", encoding="utf-8") as f:
        f.write(refresh(readme, log, output_root))


if __name__ == "__main__":
    main(sys.argv)
