"""The web fixtures' fetch is safe when several processes ask at once (the suite runs on 2 workers).

On a fresh machine both pytest workers found no cached pywb samples and
fetched them together: one removed and recreated the folder the other was
filling (``FileExistsError`` in 48 web tests of a clean-clone CI run). The
fetch now holds a lock per fixture; the second process waits and finds the
first one's marker.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("fetch_web_fixtures", sys.argv[1])
fetch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch)
print(fetch.pywb_warcs())
"""


def test_three_processes_fetching_into_an_empty_cache_at_once_all_get_the_whole_sample(tmp_path):
    env = {**os.environ, "BEAM_PIPELINE_CACHE": str(tmp_path / "cache")}
    script = str(REPO / "scripts" / "fetch_web_fixtures.py")
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD, script], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outcomes = [child.communicate(timeout=600) for child in children]
    for child, (out, err) in zip(children, outcomes):
        assert child.returncode == 0, err[-2000:]
    (folder,) = {out.strip() for out, _ in outcomes}
    warcs = Path(folder)
    assert sorted(p.name for p in warcs.iterdir()) == sorted(p.name for p in warcs.iterdir() if p.stat().st_size)
    names = {p.name for p in warcs.iterdir()}
    assert {"iana.warc.gz", "example.arc", "example.warc.gz"} <= names
    assert {p.name for p in (warcs.parent / "cdx").iterdir()} >= {"iana.cdx", "example.cdx"}
