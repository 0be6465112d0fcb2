"""The run report in a real browser: headless Chromium loads it offline, runs its script, decodes every plot.

The page's own inline script writes on ``<html>`` how many ``img.plot`` it has
(``data-plots``), how many decoded with a non-zero natural size
(``data-plots-ok``, and ``data-loaded="ok"`` on each image) and how many
script / resource errors fired (``data-script-errors``,
``data-resource-errors``). ``--dump-dom`` prints the DOM after the load event,
so the test reads those attributes with the standard library's HTML parser. A
negative control (a broken plot and a throwing script) proves the harness sees
failures. Skipped only when Chromium is not installed (``.ci/run`` installs
Debian's ``chromium``).
"""
from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
import tempfile

import pytest

from beam_pipeline.report import write_compare, write_report
from beam_pipeline.report.html import page

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser"))
                 if p and os.path.exists(p)), None)
# `make test` on a machine without Chromium skips these; .ci/run installs it and sets
# BEAM_PIPELINE_REQUIRE_BROWSER=1, so there a missing browser fails instead of hiding the tests.
if CHROMIUM is None and os.environ.get("BEAM_PIPELINE_REQUIRE_BROWSER") == "1":
    raise RuntimeError("BEAM_PIPELINE_REQUIRE_BROWSER=1 but no chromium binary was found")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium; .ci/run installs it)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


def chromium(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


class _Dom(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.root: dict = {}
        self.plots: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "html":
            self.root = attrs
        elif tag == "img" and "plot" in (attrs.get("class") or "").split():
            self.plots.append(attrs)


def rendered(path: str) -> _Dom:
    """The DOM of ``path`` after Chromium loaded it and its script ran."""
    result = chromium("--virtual-time-budget=10000", "--dump-dom", "file://" + os.path.abspath(path))
    assert result.returncode == 0, result.stderr[-3000:]
    dom = _Dom()
    dom.feed(result.stdout)
    assert dom.root.get("data-ready") == "1", f"the page's load handler never ran:\n{result.stdout[:500]}"
    return dom


def assert_clean(dom: _Dom, expected_ids: set[str]) -> None:
    assert dom.root.get("data-script-errors") == "0", dom.root.get("data-last-error")
    assert dom.root.get("data-resource-errors") == "0"
    assert int(dom.root["data-plots"]) == len(dom.plots) == int(dom.root["data-plots-ok"]) > 0
    for plot in dom.plots:
        assert plot.get("data-loaded") == "ok", plot.get("data-plot")
        assert int(plot["data-natural-width"]) > 200, plot.get("data-plot")
    assert expected_ids <= {p["data-plot"] for p in dom.plots}


@pytest.fixture(scope="module")
def report(built, tmp_path_factory):
    run_dir = os.path.join(built["root"], "runs", built["metrics"]["run_id"])
    path = str(tmp_path_factory.mktemp("browser") / "report.html")
    write_report(run_dir, output=path, report_config={"target_tokens": 20_000_000,
                                                      "mixture": {"docs": 5, "encyclopedic": 3, "legal": 2}})
    return path


def test_report_loads_offline_without_errors_and_every_plot_decodes(report):
    dom = rendered(report)
    assert_clean(dom, {"funnel", "drops", "hist-0", "hist-1", "clusters", "mixture", "shards"})


def test_comparison_page_loads_without_errors(built, tmp_path):
    run_dir = os.path.join(built["root"], "runs", built["metrics"]["run_id"])
    path, _ = write_compare(run_dir, built["dataset"], output=str(tmp_path / "compare.html"))
    assert_clean(rendered(path), {"counts", "drops", "mixture"})


def test_screenshot_is_not_blank(report, tmp_path):
    from PIL import Image

    shot = str(tmp_path / "shot.png")
    result = chromium("--window-size=1400,2400", f"--screenshot={shot}", "file://" + report)
    assert result.returncode == 0 and os.path.exists(shot), result.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 2400)
    colors = image.resize((140, 240)).getcolors(maxcolors=140 * 240)
    assert len(colors) > 50, "the screenshot is (nearly) one colour"


def test_the_harness_sees_a_broken_plot_and_a_script_error(tmp_path):
    broken = ('<section><img class="plot" data-plot="bad" src="data:image/png;base64,bm90IGEgcG5n">'
              "<script>undefinedFunction();</script></section>")
    path = tmp_path / "broken.html"
    path.write_text(page("broken", "<header></header>", [], [broken], ""), encoding="utf-8")
    dom = rendered(str(path))
    assert dom.root["data-script-errors"] != "0"
    assert dom.root["data-plots"] == "1" and dom.root["data-plots-ok"] == "0"
    assert dom.plots[0]["data-loaded"] == "broken"
