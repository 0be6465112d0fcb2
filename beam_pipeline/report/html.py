"""Rendering a run report (and a comparison) as one self-contained HTML page.

The pages are Jinja2 templates (``report/templates``: ``run.html`` and
``compare.html`` extend ``page.html``; ``macros.html`` has the table, figure
and delta pieces and the arrivals section) rendered with autoescaping on and
undefined names an error, so every value from the data is escaped unless a
template marks it otherwise.
Template lines are joined without their indentation (:class:`_JoinedLines`),
so the templates read as indented markup while the page is one line per
section. This module turns the gathered numbers into what the templates
iterate over (totals, per-bucket shard sizes, sample order) and formats
numbers (the ``num``, ``pct`` ... filters).

Everything the page shows is inside the file: plots are PNG ``data:`` URIs,
the style sheet and a tiny script are inline, fonts are the viewer's own. A
Content-Security-Policy forbids every other load, so the page works offline
and a stray external reference would show up as a blocked load, not a silent
dependency. The inline script only records, on ``<html>``, how many plots
decoded (``data-plots``, ``data-plots-ok``), any script error
(``data-script-errors``) and the layout (``data-page-width`` against
``data-viewport-width``, ``data-overflowing``: elements sticking out of the
viewport outside a horizontal scroller, ``data-clipped``: boxes that cut off
their content): what ``tests/test_report_browser.py`` reads from headless
Chromium at 1400 and 420 px. Every table sits in its own horizontal
scroller, so a wide table never widens the page. The page holds no timestamp: the same run gives the same
bytes.
"""

from __future__ import annotations

import math

import jinja2
from markupsafe import Markup

from beam_pipeline.arrivals.report import gather_arrivals

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

STYLE = """
:root { --ink:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f7f8fa; --card:#fff; --accent:#0072B2;
        --warn-bg:#fff4e5; --warn:#8a4b00; --ok:#0b6e4f; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color:var(--ink); background:var(--bg); }
header { background:#102a43; color:#fff; padding:20px 32px 16px; }
header h1 { margin:0 0 4px; font-size:22px; }
header .sub { color:#bcccdc; font-size:13px; }
header code { color:#fff; }
.kpis { display:flex; flex-wrap:wrap; gap:10px; margin-top:14px; }
.kpi { background:rgba(255,255,255,.09); border-radius:8px; padding:8px 14px; min-width:120px; }
.kpi b { display:block; font-size:20px; }
.kpi span { color:#bcccdc; font-size:12px; }
nav { position:sticky; top:0; z-index:2; background:#fff; border-bottom:1px solid var(--line);
      padding:8px 32px; display:flex; flex-wrap:wrap; gap:4px 16px; font-size:13px; }
nav a { color:var(--accent); text-decoration:none; }
main { padding:16px 32px 40px; max-width:1500px; }
header .sub, .kpi b, .note, p, li { overflow-wrap:anywhere; }
td, th { overflow-wrap:break-word; }
td.n, th.n { white-space:nowrap; }
.scroll { overflow-x:auto; max-width:100%; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:16px 20px;
          margin:16px 0; }
section h2 { margin:0 0 4px; font-size:18px; }
p.lead { margin:0 0 12px; color:var(--muted); }
.grid { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(560px, 100%), 1fr)); gap:16px;
        align-items:start; }
.grid > * { min-width:0; }
figure { margin:0; }
figure img { max-width:100%; height:auto; display:block; border:1px solid var(--line); border-radius:6px; }
figcaption { color:var(--muted); font-size:12px; margin-top:4px; }
table { border-collapse:collapse; font-size:13px; margin:8px 0; }
th, td { border-bottom:1px solid var(--line); padding:4px 10px; text-align:left; vertical-align:top; }
th { background:#f0f4f8; font-weight:600; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
code, .mono { font-family:ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size:12px; }
.note { background:#eef2f7; border-left:4px solid #9fb3c8; padding:10px 14px; border-radius:4px; margin:8px 0; }
.warnings { background:var(--warn-bg); border:1px solid #f0c36d; }
.warnings h2 { color:var(--warn); }
.warnings li { margin:4px 0; }
details { border:1px solid var(--line); border-radius:8px; margin:8px 0; background:#fff; }
details > summary { cursor:pointer; padding:8px 12px; font-weight:600; }
details[open] > summary { border-bottom:1px solid var(--line); }
.samples { padding:8px 12px 12px; display:grid; grid-template-columns:repeat(auto-fill, minmax(min(440px, 100%), 1fr));
           gap:10px; }
.doc { border:1px solid var(--line); border-radius:6px; padding:8px; min-width:0; }
.doc .meta { color:var(--muted); font-size:12px; margin-bottom:4px; word-break:break-all; }
pre.text { white-space:pre-wrap; word-break:break-word; background:#fafbfc; border:1px solid var(--line);
           border-radius:4px; padding:8px; margin:0; max-height:180px; overflow:auto; font-size:12px; }
.cluster { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(280px, 100%), 1fr)); gap:10px;
           padding:10px 12px; }
.member { border:1px solid var(--line); border-radius:6px; padding:8px; min-width:0; }
.member.rep { border-color:#009E73; box-shadow:inset 0 3px 0 #009E73; }
.tag { display:inline-block; font-size:11px; padding:1px 6px; border-radius:8px; background:#e4e7eb; }
.tag.keep { background:#d1f2e4; color:var(--ok); }
.tag.drop { background:#fde2e1; color:#a61b1b; }
.tag.warn { background:#ffe8c2; color:var(--warn); }
footer { color:var(--muted); font-size:12px; padding:0 32px 32px; overflow-wrap:anywhere; }
@media (max-width: 700px) {
  header { padding:14px 12px 12px; } nav { padding:8px 12px; } main { padding:8px 8px 24px; }
  section { padding:12px 10px; } footer { padding:0 12px 24px; } .kpi { min-width:0; flex:1 1 40%; }
  .samples, .cluster { padding:8px 4px; }
}
"""

#: Records plot decoding, script errors and layout (what overflows the viewport, what a box clips) on <html>
#: for the browser test; nothing else.
SCRIPT = """
(function () {
  var root = document.documentElement;
  root.setAttribute('data-script-errors', '0');
  root.setAttribute('data-resource-errors', '0');
  window.addEventListener('error', function (e) {
    var isResource = e.target && e.target !== window && e.target.tagName;
    var name = isResource ? 'data-resource-errors' : 'data-script-errors';
    root.setAttribute(name, String(Number(root.getAttribute(name)) + 1));
    if (!isResource) { root.setAttribute('data-last-error', String(e.message || 'error')); }
  }, true);
  window.addEventListener('load', function () {
    var images = document.querySelectorAll('img.plot'), ok = 0;
    for (var i = 0; i < images.length; i++) {
      var good = images[i].complete && images[i].naturalWidth > 0 && images[i].naturalHeight > 0;
      images[i].setAttribute('data-loaded', good ? 'ok' : 'broken');
      images[i].setAttribute('data-natural-width', String(images[i].naturalWidth));
      if (good) { ok++; }
    }
    root.setAttribute('data-plots', String(images.length));
    root.setAttribute('data-plots-ok', String(ok));
    layout();
    root.setAttribute('data-ready', '1');
  });
  function describe(el) {
    var cls = typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '';
    return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + cls;
  }
  // What sticks out of the viewport (outside a horizontal scroller) and what a box cuts off.
  function layout() {
    var width = document.documentElement.clientWidth, over = [], clipped = [];
    var all = document.body.getElementsByTagName('*');
    for (var i = 0; i < all.length; i++) {
      var el = all[i], box = el.getBoundingClientRect();
      if (!box.width && !box.height) { continue; }
      var scroller = el.parentElement && el.parentElement.closest('.scroll, pre');
      if (!scroller && (box.right > width + 1 || box.left < -1)) { over.push(describe(el)); }
      var style = getComputedStyle(el);
      var hidesX = style.overflowX === 'hidden' || style.overflowX === 'clip';
      var hidesY = style.overflowY === 'hidden' || style.overflowY === 'clip';
      if ((hidesX && el.scrollWidth > el.clientWidth + 1) || (hidesY && el.scrollHeight > el.clientHeight + 1)) {
        clipped.push(describe(el));
      }
    }
    root.setAttribute('data-viewport-width', String(width));
    root.setAttribute('data-page-width', String(document.documentElement.scrollWidth));
    root.setAttribute('data-overflowing', String(over.length));
    root.setAttribute('data-overflowing-what', over.slice(0, 8).join(' '));
    root.setAttribute('data-clipped', String(clipped.length));
    root.setAttribute('data-clipped-what', clipped.slice(0, 8).join(' '));
  }
})();
"""


#: Windows listed in the arrivals section at most (the latest); the totals count them all.
MAX_WINDOWS = 50


def num(value, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return "∞"
    if isinstance(value, float) and digits:
        return f"{value:,.{digits}f}"
    return f"{round(value):,}"


def pct(part, whole) -> str:
    return f"{part / whole:.1%}" if whole else "–"


def _text(value) -> str:
    """A value as page text; None is empty."""
    return "" if value is None else str(value)


def _where(row: dict) -> str:
    """Where a document came from: its URL, else file:position."""
    return row.get("url") or f"{row.get('file', '')}:{row.get('position', '')}"


def _reuse(reused) -> str:
    return "reused" if reused else ("ran" if reused is not None else "–")


class _JoinedLines(jinja2.PackageLoader):
    """Template lines without their indentation and line breaks: the page has no whitespace the templates
    do not write (``{{ nl }}``), and a template can be indented like the markup it writes."""

    def get_source(self, environment, template):
        source, filename, uptodate = super().get_source(environment, template)
        return "".join(line.lstrip() for line in source.splitlines()), filename, uptodate


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_JoinedLines("beam_pipeline.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        num=num,
        pct=pct,
        text=_text,
        where=_where,
        reuse=_reuse,
        seconds=lambda s: "–" if s is None else f"{s:.1f}",
        general=lambda v: f"{v:g}",
        signed_share=lambda v: f"{v:+.1%}",
    )
    env.globals.update(zip=zip, nl="\n", csp=Markup(CSP), script=Markup(SCRIPT), style=Markup(STYLE))
    return env


_ENV = _environment()


def page(title: str, header: str, nav: list[tuple[str, str]], sections: list[str], footer: str) -> str:
    """The page around ready-made HTML (``header``, ``sections``, ``footer`` are trusted markup)."""
    return _ENV.get_template("page.html").render(
        title=title, header=Markup(header), nav=nav, sections=[Markup(s) for s in sections if s], footer=Markup(footer)
    )


# --- the run report ---------------------------------------------------------


def render_run(data: dict, plots: dict) -> str:
    run = data["run"]
    dropped = run["records_dropped"]
    kpis = [
        ("records_read", num(run["records_in"]), "records read"),
        ("documents", num(run["documents"]), "documents in the dataset"),
        ("tokens", num(run["tokens"]), "tokens (with EOS)"),
        ("sequences", f"{num(run['sequences'])} × {num(run['seq_len'])}", "sequences × seq_len"),
        ("shards", num(run["shards"]), "shards"),
        ("records_dropped", f"{num(dropped)} ({pct(dropped, run['records_in'])})", "records dropped"),
    ]
    timing = run.get("timing_seconds") or {}
    if timing.get("total") is not None:
        kpis.append(("wall_clock", f"{timing['total']:.1f} s", "job start to published"))
    nav = [
        ("cascade", "Cascade"),
        ("drops", "Drops"),
        ("annotations", "Annotations"),
        ("language", "Language"),
        ("duplicates", "Duplicates"),
        ("mixture", "Mixture & budget"),
        ("shards", "Shards"),
        ("samples", "Dropped samples"),
        ("versions", "Versions"),
    ]
    arrivals = gather_arrivals(run["root"], run["snapshot_id"])  # a bronze snapshot's arrivals (beam_pipeline/arrivals)
    if arrivals is not None:
        nav.insert(-1, ("arrivals", "Arrivals"))
    return _ENV.get_template("run.html").render(
        title=f"Run report · {data['name']} · {run['run_id']}",
        data=data,
        plots=plots,
        kpis=kpis,
        nav=nav,
        drops=_drops(data),
        shards=_shards(data["shards"]),
        samples=_samples(data),
        exact_only=not any(c["stage"].startswith("near") for c in data.get("clusters") or []),
        arrivals=arrivals,
        max_windows=MAX_WINDOWS,
    )


def arrivals_section(root: str, snapshot_id: str) -> str:
    """The report's "Arrivals" section for a run built from a bronze snapshot, else ``""``."""
    info = gather_arrivals(root, snapshot_id)
    if info is None:
        return ""
    return str(_ENV.get_template("macros.html").module.arrivals_section(info, MAX_WINDOWS))


def _drops(data: dict) -> dict:
    """The drops table: a row per stage:reason (a count per source, then the total), the totals, the reads."""
    drops, read = data["drops_by_source"], data["read_by_source"]
    sources = [s for s in data["sources"] if s in drops]
    reasons = [f"{s['name']}:{r}" for s in data["stages"] for r in s["dropped"]]
    totals = [sum(drops[s].values()) for s in sources]
    reads = [read[s] for s in sources]
    return {
        "sources": sources,
        "reasons": [
            (r, [drops[s].get(r, 0) for s in sources] + [sum(drops[s].get(r, 0) for s in sources)]) for r in reasons
        ],
        "dropped": totals + [sum(totals)],
        "read": reads + [sum(reads)],
    }


def _shards(shards: list[dict]) -> list[dict]:
    """Shard sizes per domain bucket, by bucket name."""
    by_domain: dict[str, list] = {}
    for s in shards:
        by_domain.setdefault(s["domain"], []).append(s)
    return [
        {
            "domain": d,
            "shards": len(v),
            "min": min(s["tokens"] for s in v),
            "mean": sum(s["tokens"] for s in v) / len(v),
            "max": max(s["tokens"] for s in v),
            "bytes": sum(s["bytes"] for s in v),
        }
        for d, v in sorted(by_domain.items())
    ]


def _samples(data: dict) -> list[tuple[str, dict | None]]:
    """(stage:reason, its sample or None) for every drop reason but dead letters, then reasons only sampled."""
    samples = data.get("samples") or {}
    reasons = [f"{s['name']}:{r}" for s in data["stages"] for r in s["dropped"] if r != "dead_letter"]
    return [(reason, samples.get(reason)) for reason in reasons + [r for r in samples if r not in reasons]]


# --- the comparison ---------------------------------------------------------


def render_compare(cmp: dict, plots: dict) -> str:
    a, b = cmp["a"], cmp["b"]
    nav = [("versions", "Versions"), ("counts", "Counts"), ("drops", "Drops"), ("mixture", "Mixture")]
    return _ENV.get_template("compare.html").render(
        title=f"Comparison · {a['label']} → {b['label']}", cmp=cmp, plots=plots, nav=nav
    )
