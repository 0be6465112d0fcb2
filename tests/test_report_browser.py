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


# --------------------------------------------------------------------------
# Layout at a desktop and a phone width: nothing sticks out, nothing is cut off


class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

    ``--window-size`` cannot go below 500 px in headless Chromium; the
    protocol's ``Emulation.setDeviceMetricsOverride`` sets the page's viewport
    to any width (what the browser's device toolbar does). Messages are JSON,
    each ended by a NUL byte: Chromium reads fd 3 and writes fd 4.
    """

    def __init__(self):
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        commands_r, self._commands = os.pipe()
        self._answers, answers_w = os.pipe()

        def wire():  # in the child: the pipe ends on fds 3 and 4 (dup first: they may already sit there)
            commands, answers = os.dup(commands_r), os.dup(answers_w)
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        self._process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=wire,
            close_fds=False)
        os.close(commands_r)
        os.close(answers_w)
        self._buffer, self._id = b"", 0

    def __enter__(self) -> "DevTools":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._commands)
        os.close(self._answers)
        self._profile.cleanup()

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 120):
        import json

        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = json.loads(self._read(timeout))
            if answer.get("id") == self._id:  # (events in between are not needed)
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def _read(self, timeout: float) -> bytes:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], timeout)
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return message

    def render(self, path: str, width: int, max_height: int = 16000) -> tuple[dict, bytes, int]:
        """(the attributes of <html> after the page's load handler ran, a PNG of the page, its height)."""
        import base64
        import json
        import time

        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

        def evaluate(expression: str):
            return self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                             session)["result"].get("value")

        metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics, session)
        self.send("Page.navigate", {"url": "file://" + os.path.abspath(path)}, session)
        deadline = time.monotonic() + 60
        while evaluate("document.documentElement.getAttribute('data-ready')") != "1":
            assert time.monotonic() < deadline, "the page's load handler never ran"
            time.sleep(0.1)
        attributes = json.loads(evaluate("JSON.stringify(Object.fromEntries(Array.from("
                                         "document.documentElement.attributes, a => [a.name, a.value])))"))
        height = evaluate("document.documentElement.scrollHeight")
        self.send("Emulation.setDeviceMetricsOverride", {**metrics, "height": min(height, max_height)}, session)
        png = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, session)["data"])
        self.send("Target.closeTarget", {"targetId": target})
        return attributes, png, height


def keep_screenshot(png: bytes, name: str, tmp_path) -> str:
    """Write a screenshot next to the test (and to $BEAM_PIPELINE_SCREENSHOTS, to look at it)."""
    path = tmp_path / name
    path.write_bytes(png)
    folder = os.environ.get("BEAM_PIPELINE_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        shutil.copy(path, os.path.join(folder, name))
    return str(path)


@pytest.mark.parametrize("width", [1400, 420])
def test_no_horizontal_overflow_and_nothing_clipped(report, width, tmp_path):
    from PIL import Image

    with DevTools() as browser:
        layout, png, height = browser.render(report, width)
    shot = keep_screenshot(png, f"report-{width}.png", tmp_path)
    assert layout["data-viewport-width"] == str(width)  # the page really was laid out at this width
    assert layout["data-script-errors"] == "0" and layout["data-plots"] == layout["data-plots-ok"]
    assert layout["data-page-width"] == str(width), "the page is wider than the window"
    assert layout["data-overflowing"] == "0", layout["data-overflowing-what"]
    assert layout["data-clipped"] == "0", layout["data-clipped-what"]
    image = Image.open(shot).convert("RGB")
    assert image.size == (width, min(height, 16000)) and height > 3000
    colors = image.resize((width // 10, 400)).getcolors(maxcolors=width * 40)
    assert len(colors) > 50, "the screenshot is (nearly) one colour"


def test_the_layout_check_sees_overflow_and_clipping(tmp_path):
    """Negative control: a wide plot outside a scroller, a table's box that hides its overflow."""
    wide = ('<section><img class="plot" data-plot="wide" style="width:900px" '
            'src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==">'
            '<div style="overflow:hidden;width:200px"><table><tr><td style="white-space:nowrap">'
            + "x" * 300 + '</td></tr></table></div>'
            '<div class="scroll"><table><tr><td style="white-space:nowrap">' + "y" * 300 + "</td></tr></table></div>"
            "</section>")
    path = tmp_path / "wide.html"
    path.write_text(page("wide", "<header></header>", [], [wide], ""), encoding="utf-8")
    with DevTools() as browser:
        layout, _, _ = browser.render(str(path), 420)
    assert layout["data-viewport-width"] == "420"
    assert int(layout["data-page-width"]) > 420
    # the plot, and the table its box clips (table, tbody, tr, td); not the one in its own scroller
    assert layout["data-overflowing"] == "5"
    assert layout["data-overflowing-what"].split() == ["img.plot", "table", "tbody", "tr", "td"]
    assert layout["data-clipped"] == "1" and layout["data-clipped-what"] == "div"
