"""Rendering a run report (and a comparison) as one self-contained HTML page.

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

import html
import math
from typing import Iterable

from beam_pipeline.report.plots import Plot

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


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


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


def figure(plot: Plot | None, caption: str = "") -> str:
    if plot is None:
        return ""
    return (f'<figure><img class="plot" id="plot-{esc(plot.id)}" data-plot="{esc(plot.id)}" alt="{esc(plot.alt)}" '
            f'src="{plot.data_uri}">'
            + (f"<figcaption>{caption}</figcaption>" if caption else "") + "</figure>")


def table(headers: list[str], rows: Iterable[list], numeric: set[int] = frozenset(), name: str = "") -> str:
    """A table in its own horizontal scroller: a wide table scrolls inside the page, never widens it.

    ``name`` (``data-table``) lets tests find the table; cells are HTML.
    """
    head = "".join(f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    named = f' data-table="{esc(name)}"' if name else ""
    return f'<div class="scroll"><table{named}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def page(title: str, header: str, nav: list[tuple[str, str]], sections: list[str], footer: str) -> str:
    links = "".join(f'<a href="#{esc(anchor)}">{esc(label)}</a>' for anchor, label in nav)
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><script>{SCRIPT}</script><style>{STYLE}</style></head>\n"
        f"<body>{header}<nav>{links}</nav><main>\n" + "\n".join(s for s in sections if s)
        + f"\n</main><footer>{footer}</footer></body></html>\n")


def section(anchor: str, title: str, lead: str, body: str, extra_class: str = "") -> str:
    cls = f' class="{extra_class}"' if extra_class else ""
    return (f'<section id="{esc(anchor)}"{cls}><h2>{esc(title)}</h2>'
            + (f'<p class="lead">{lead}</p>' if lead else "") + body + "</section>")


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
        kpis.append(("wall_clock", f"{timing['total']:.1f} s", "build wall clock"))
    header = (
        f'<header><h1>Run report · {esc(data["name"])}</h1>'
        f'<div class="sub">run <code>{esc(run["run_id"])}</code> · dataset <code>{esc(run["dataset_id"][:16])}…</code>'
        f' · snapshot <code>{esc(run["snapshot_id"])}</code> · config <code>{esc(run["config_digest"][:12])}</code></div>'
        '<div class="kpis">' + "".join(f'<div class="kpi" data-kpi="{name}"><b>{v}</b><span>{esc(k)}</span></div>'
                                       for name, v, k in kpis)
        + "</div></header>")
    nav = [("cascade", "Cascade"), ("drops", "Drops"), ("annotations", "Annotations"), ("language", "Language"),
           ("duplicates", "Duplicates"), ("mixture", "Mixture & budget"), ("shards", "Shards"),
           ("samples", "Dropped samples"), ("versions", "Versions")]
    sections = [_warnings(data), _cascade(data, plots), _drops(data, plots), _annotations(data, plots),
                _language(data, plots), _duplicates(data, plots), _mixture(data, plots), _shards(data, plots),
                _samples(data), _versions(data)]
    from beam_pipeline.arrivals.report import arrivals_section  # a bronze snapshot's arrivals (beam_pipeline/arrivals)
    arrivals = arrivals_section(run["root"], run["snapshot_id"])
    if arrivals:
        sections.insert(-1, arrivals)
        nav.insert(-1, ("arrivals", "Arrivals"))
    footer = (f"Written by <code>python -m beam_pipeline report {esc(run.get('run_dir') or run['root'] + '/runs/' + run['run_id'])}</code> "
              "from the run's metrics.json, the layers' ledgers and partitions, and the dataset manifest. "
              "Self-contained: no network is needed to view it.")
    return page(f"Run report · {data['name']} · {run['run_id']}", header, nav, sections, footer)


def _warnings(data: dict) -> str:
    items = data["warnings"] + data["notes"]
    if not items:
        return ""
    return section("warnings", f"Warnings ({len(data['warnings'])})" if data["warnings"] else "Notes", "",
                   "<ul>" + "".join(f"<li>{esc(w)}</li>" for w in items) + "</ul>",
                   "warnings" if data["warnings"] else "")


def _cascade(data: dict, plots: dict) -> str:
    rows = []
    for s in data["stages"]:
        dropped = ", ".join(f"{esc(r)} {num(n)}" for r, n in s["dropped"].items()) or "–"
        gated = ", ".join(f"{esc(r)} {num(n)}" for r, n in s["gated"].items()) or "–"
        rows.append([f"<code>{esc(s['name'])}</code>", num(s["in"]), num(s["dropped_total"]), dropped,
                     num(s["after"]), num(s["scored"]) if s["scored"] is not None else "–",
                     gated if s["kind"] == "scores" else "–",
                     "reused" if s["reused"] else ("ran" if s["reused"] is not None else "–"),
                     f"{s['seconds']:.1f}" if s["seconds"] is not None else "–"])
    body = figure(plots.get("funnel"), "Documents are the run's counts. Tokens are exact for the dataset; "
                  "for documents dropped before tokenization they are estimated (≈, hatched) from their "
                  "characters × their source's tokens per character among kept documents.")
    body += table(["stage", "in", "dropped", "dropped by reason (dead letters included)", "left in the flow",
                   "scored", "not scored: gated by rules over earlier stages", "layer", "seconds"],
                  rows, {1, 2, 4, 5, 8}, name="cascade")
    return section("cascade", "Cascade funnel", "Every record that entered a stage was passed on, or dropped with a "
                   "reason or dead-lettered: <code>in − dropped = left in the flow</code>, checked per stage and "
                   "source. The scoring stages of the cascade drop nothing: each scores the documents that pass the "
                   "policy rules over the stages before it; the others stay in the flow, unscored, until "
                   "<code>select</code> drops them.", body)


def _drops(data: dict, plots: dict) -> str:
    drops = data["drops_by_source"]
    sources = [s for s in data["sources"] if s in drops]
    reasons = [f"{s['name']}:{r}" for s in data["stages"] for r in s["dropped"]]
    if not reasons:
        return section("drops", "Drops by reason per source", "", '<div class="note">Nothing was dropped.</div>')
    read = data["read_by_source"]
    rows = [[f"<code>{esc(r)}</code>"] + [num(drops[s].get(r, 0)) for s in sources]
            + [num(sum(drops[s].get(r, 0) for s in sources))] for r in reasons]
    totals = {s: sum(drops[s].values()) for s in sources}
    rows.append(["<b>dropped</b>"] + [f"<b>{num(totals[s])}</b>" for s in sources]
                + [f"<b>{num(sum(totals.values()))}</b>"])
    rows.append(["records read"] + [num(read[s]) for s in sources] + [num(sum(read[s] for s in sources))])
    rows.append(["share dropped"] + [pct(totals[s], read[s]) for s in sources]
                + [pct(sum(totals.values()), sum(read[s] for s in sources))])
    body = figure(plots.get("drops")) + table(["stage:reason"] + sources + ["total"], rows,
                                              set(range(1, len(sources) + 2)), name="drops")
    return section("drops", "Drops by reason per source", "What each stage removed from the flow, per source "
                   "(the scoring stages' gated documents are not drops: select drops them, once).", body)


def _annotations(data: dict, plots: dict) -> str:
    hists = data.get("histograms") or []
    if not hists:
        return section("annotations", "Annotation scores", "",
                       '<div class="note">No numeric annotation column in this run\'s layers.</div>')
    figures = []
    for h, plot in zip(hists, plots.get("histograms") or []):
        limits = ", ".join(f"<code>{esc(t['name'])}{'' if t['name'][-1:] in '<>=' else ' ='} {esc(t['value'])}</code>"
                           for t in h["thresholds"]) or "no policy threshold on this column"
        extra = f"; {num(h['zeros'])} zeros not on the log axis" if h.get("zeros") else ""
        extra += f"; {num(h['nulls'])} without a value" if h.get("nulls") else ""
        figures.append(figure(plot, f"<code>{esc(h['layer'])}.{esc(h['column'])}</code>: {num(h['n'])} documents, "
                              f"min {num(h['min'], 2)}, mean {num(h['mean'], 2)}, max {num(h['max'], 2)}{extra}. "
                              f"Policy: {limits}."))
    flag_rows = [[f"<code>{esc(f['layer'])}.{esc(f['column'])}</code>", num(f["true"]), num(f["of"]),
                  pct(f["true"], f["of"])] for f in data.get("flags") or []]
    flag_table = ("<h3>Flags</h3>" + table(["column", "true", "documents", "share"], flag_rows, {1, 2, 3}, name="flags")
                  if flag_rows else "")
    return section("annotations", "Annotation scores",
                   "Every numeric column of the annotation layers, with the policy thresholds that act on it "
                   "(dashed). Changing a threshold is a re-selection: the scores stay.",
                   '<div class="grid">' + "".join(figures) + "</div>" + flag_table)


def _language(data: dict, plots: dict) -> str:
    mix = data.get("language")
    if not mix:
        return section("language", "Language mix", "", '<div class="note"><b>No language annotation in this '
                       "run.</b> No layer has a <code>language</code> column (a language-ID stage adds one); "
                       "nothing is plotted rather than a guess.</div>")
    return section("language", "Language mix", f"{num(mix['languages'])} languages in "
                   f"<code>{esc(mix['layer'])}.{esc(mix['column'])}</code>.", figure(plots.get("language")))


def _duplicates(data: dict, plots: dict) -> str:
    found = data.get("clusters") or []
    if not found:
        return section("duplicates", "Duplicate clusters", "",
                       '<div class="note">No duplicate annotation layer in this run.</div>')
    rows = [[f"<code>{esc(c['layer'])}</code>", num(c["clusters"]), num(c["members"]), num(c["redundant"]),
             num(c["largest"])] for c in found]
    body = figure(plots.get("clusters")) + table(
        ["layer", "clusters (2+ members)", "documents in them", "redundant copies", "largest"], rows, {1, 2, 3, 4},
        name="clusters")
    if not any(c["stage"].startswith("near") for c in found):
        body += ('<div class="note">Exact duplicates only: no near-duplicate layer in this run. '
                 "A <code>near_dedup</code> layer's cluster sizes appear here when it exists.</div>")
    for group in data.get("top_clusters") or []:
        body += f"<h3>Largest clusters · <code>{esc(group['layer'])}</code></h3>"
        for c in group["clusters"]:
            members = "".join(_member(m, c["representative"] is not None) for m in c["members"])
            more = f" (showing {len(c['members'])})" if c["size"] > len(c["members"]) else ""
            texts = {1: " · all exact copies", 2: " · different texts"}.get(c.get("distinct_texts"), "")
            body += (f"<details{' open' if c is group['clusters'][0] else ''}><summary>{num(c['size'])} members"
                     f"{more}{texts} · {esc(group['key_column'])} <code>{esc(c['key'])}</code></summary>"
                     f'<div class="cluster">{members}</div></details>')
    return section("duplicates", "Duplicate clusters",
                   "Cluster sizes on log-log axes, then the largest clusters with their members side by side "
                   "(the representative, kept, is outlined green) so false positives can be judged.", body)


def _member(m: dict, has_representative: bool = True) -> str:
    if not has_representative:
        tag = '<span class="tag">member</span>'
    else:
        tag = '<span class="tag keep">representative</span>' if m.get("representative") else \
            '<span class="tag drop">duplicate</span>'
    where = m.get("url") or f"{m.get('file', '')}:{m.get('position', '')}"
    trunc = " …" if m.get("truncated") else ""
    return (f'<div class="member{" rep" if m.get("representative") else ""}"><div class="meta">{tag} '
            f'<b>{esc(m.get("source"))}</b> · {num(m.get("n_chars"))} chars · <code>{esc(m["doc_id"])}</code><br>'
            f"{esc(where)}</div><pre class=\"text\">{esc(m.get('text', ''))}{trunc}</pre></div>")


def _mixture(data: dict, plots: dict) -> str:
    mix, budget = data["mixture"], data["budget"]
    rows = []
    for r in budget["rows"]:
        b = mix["buckets"][r["bucket"]]
        warn = r["epochs"] is not None and r["epochs"] > budget["max_epochs"]
        epochs = (f'<span class="tag warn">{num(r["epochs"], 2)} ⚠</span>' if warn else num(r["epochs"], 2)) \
            if r["epochs"] is not None else "–"
        rows.append([esc(r["bucket"]), num(b["documents"]), num(b["shards"]), num(r["unique_tokens"]),
                     pct(b["tokens"], mix["total_tokens"]),
                     pct(b["target_share"], 1) if b["target_share"] is not None else "–",
                     num(r["wanted_tokens"]), epochs])
    body = figure(plots.get("mixture"))
    body += table(["bucket", "documents", "shards", "unique tokens", "actual share", "target share",
                   "tokens wanted", "epochs"], rows, {1, 2, 3, 4, 5, 6, 7}, name="mixture")
    if budget["target_tokens"]:
        body += (f'<p>Token budget: <code>report.target_tokens = {num(budget["target_tokens"])}</code>, split by '
                 f'{esc(budget["mixture_from"])}. Epochs = tokens wanted ÷ unique tokens of the bucket; more than '
                 f'<b>{budget["max_epochs"]:g}</b> epochs is flagged.</p>')
    else:
        body += ('<div class="note">No <code>report.target_tokens</code> in the config: set it (and '
                 '<code>report.mixture</code>, a weight per domain bucket) to see the epochs each bucket must be '
                 'repeated, or pass <code>--target_tokens</code> / <code>--mixture</code> to '
                 '<code>python -m beam_pipeline report</code>.</div>')
    body += f'<p class="lead">Why 4 epochs: {esc(budget["reference"])}</p>'
    return section("mixture", "Tokens per domain bucket and token budget",
                   "Unique tokens per bucket from the dataset manifest, against the target mixture "
                   f"({'config report.mixture' if mix['has_target'] else 'none set: the natural mixture is shown'}).",
                   body)


def _shards(data: dict, plots: dict) -> str:
    shards = data["shards"]
    by_domain: dict[str, list] = {}
    for s in shards:
        by_domain.setdefault(s["domain"], []).append(s)
    rows = [[esc(d), num(len(v)), num(min(s["tokens"] for s in v)), num(sum(s["tokens"] for s in v) / len(v)),
             num(max(s["tokens"] for s in v)), num(sum(s["bytes"] for s in v))] for d, v in sorted(by_domain.items())]
    body = figure(plots.get("shards")) + table(
        ["bucket", "shards", "min tokens", "mean tokens", "max tokens", "bytes on disk"], rows, {1, 2, 3, 4, 5},
        name="shards")
    return section("shards", "Shard sizes", "Tokens per shard from the manifest (shards are cut per domain bucket "
                   "to about <code>tokenize.shard_tokens</code>).", body)


def _samples(data: dict) -> str:
    samples, dead = data.get("samples") or {}, data.get("dead_letters") or {}
    reasons = [f"{s['name']}:{r}" for s in data["stages"] for r in s["dropped"] if r != "dead_letter"]
    body = ""
    seed = data["run"].get("seed")
    for reason in reasons + [r for r in samples if r not in reasons]:
        sample = samples.get(reason)
        if sample is None:
            body += (f'<details><summary>{esc(reason)}</summary><div class="samples"><div class="note">'
                     "The layers hold no per-document record of this drop.</div></div></details>")
            continue
        docs = "".join(_sample_doc(row) for row in sample["rows"])
        body += (f"<details{' open' if not body else ''} data-sample=\"{esc(reason)}\" data-shown=\"{sample['shown']}\" "
                 f"data-total=\"{sample['total']}\"><summary>{esc(reason)} · {num(sample['shown'])} of "
                 f"{num(sample['total'])} dropped"
                 f"</summary><div class=\"samples\">{docs}</div></details>")
    for stage, sample in dead.items():
        docs = "".join(
            f'<div class="doc"><div class="meta"><b>{esc(r["source"])}</b> · {esc(r["file"])}:{esc(r["position"])}'
            f' · <span class="tag drop">{esc(r["error"])}</span></div><pre class="text">{esc(r["raw_prefix"])}</pre></div>'
            for r in sample["rows"])
        body += (f"<details data-sample=\"{esc(stage)}:dead_letter\" data-shown=\"{sample['shown']}\" "
                 f"data-total=\"{sample['total']}\"><summary>{esc(stage)}:dead_letter · {num(sample['shown'])} of "
                 f"{num(sample['total'])}"
                 f"</summary><div class=\"samples\">{docs}</div></details>")
    if not body:
        body = '<div class="note">Nothing was dropped.</div>'
    k = data["settings"].get("samples_per_reason")
    return section("samples", "Dropped documents, sampled per reason",
                   f"Up to {esc(k)} per reason: the lowest <code>stable_hash64(seed={esc(seed)}, doc_id)</code>, so "
                   "the sample is unbiased and the same on every report of this run. Text truncated.", body)


def _sample_doc(row: dict) -> str:
    where = row.get("url") or f"{row.get('file', '')}:{row.get('position', '')}"
    repeat = f"<br>repeated verbatim at {esc(row['repeat_at'])}" if row.get("repeat_at") else ""
    trunc = " …" if row.get("truncated") else ""
    return (f'<div class="doc"><div class="meta"><b>{esc(row.get("source"))}</b> · {num(row.get("n_chars"))} chars · '
            f'<code>{esc(row["doc_id"])}</code> · {esc(where)}{repeat}</div>'
            f'<pre class="text">{esc(row.get("text", ""))}{trunc}</pre></div>')


def _versions(data: dict) -> str:
    run = data["run"]
    tok = run.get("tokenizer") or {}
    ids = [["run id", f"<code>{esc(run['run_id'])}</code>"],
           ["dataset id (Merkle root)", f"<code>{esc(run['dataset_id'])}</code>"],
           ["snapshot id", f"<code>{esc(run['snapshot_id'])}</code>"],
           ["config digest", f"<code>{esc(run['config_digest'])}</code>"],
           ["seed · seq_len", f"{esc(run.get('seed'))} · {esc(run.get('seq_len'))}"],
           ["tokenizer", f"<code>{esc(tok.get('path'))}</code> sha256 <code>{esc(str(tok.get('sha256', ''))[:16])}</code>"
                         f" · vocab {num(tok.get('vocab_size'))} · {esc(tok.get('dtype'))}"],
           ["manifest", f"<code>{esc(run['manifest_path'])}</code>"]]
    snap = run.get("snapshot")
    if snap:
        ids.append(["snapshot inputs", "; ".join(f"{esc(n)}: {num(s['files'])} files, {num(s['bytes'])} bytes"
                                                 for n, s in snap["sources"].items())])
    stages = [[f"<code>{esc(s['name'])}</code>", f"<code>{esc(s['version'])}</code>",
               f"<code>{esc(s['layer_key'])}</code>", f"<code>{esc((s['config_digest'] or '')[:16])}</code>",
               "reused" if s["reused"] else ("ran" if s["reused"] is not None else "–")] for s in data["stages"]]
    body = table(["", ""], ids) + table(["stage", "version", "layer key", "stage config digest", "this run"], stages)
    body += ('<p class="lead">Compare with another version: <code>python -m beam_pipeline report --compare '
             'A B</code> (runs or datasets).</p>')
    return section("versions", "Versions", "What made this dataset: equal ids mean equal data.", body)


# --- the comparison ---------------------------------------------------------

def render_compare(cmp: dict, plots: dict) -> str:
    a, b = cmp["a"], cmp["b"]
    header = (f'<header><h1>Comparison · {esc(a["label"])} → {esc(b["label"])}</h1>'
              f'<div class="sub">A = run <code>{esc(a["run_id"])}</code> dataset <code>{esc(a["dataset_id"][:16])}…</code>'
              f' · B = run <code>{esc(b["run_id"])}</code> dataset <code>{esc(b["dataset_id"][:16])}…</code></div>'
              f'<div class="kpis"><div class="kpi"><b>{"same data" if cmp["same_data"] else "different data"}</b>'
              "<span>dataset ids equal?</span></div>"
              + "".join(f'<div class="kpi"><b>{esc(v)}</b><span>{esc(k)}</span></div>' for k, v in cmp["headline"])
              + "</div></header>")
    nav = [("versions", "Versions"), ("counts", "Counts"), ("drops", "Drops"), ("mixture", "Mixture")]
    side = lambda rows, heads: table(heads, rows, set(range(1, len(heads))))  # noqa: E731
    versions = table(["", "A", "B", ""], [[esc(r["what"]), f"<code>{esc(r['a'])}</code>", f"<code>{esc(r['b'])}</code>",
                                           "" if r["a"] == r["b"] else '<span class="tag warn">changed</span>']
                                          for r in cmp["versions"]])
    if cmp["config_changes"]:
        versions += "<h3>Config changes</h3>" + table(
            ["field", "A", "B"], [[f"<code>{esc(c['field'])}</code>", f"<code>{esc(c['a'])}</code>",
                                   f"<code>{esc(c['b'])}</code>"] for c in cmp["config_changes"]])
    else:
        versions += '<div class="note">Configs are identical (except where the output goes).</div>'
    counts = side([[f"<code>{esc(r['what'])}</code>", num(r["a"]), num(r["b"]), _delta(r["a"], r["b"])]
                   for r in cmp["counts"]], ["stage · count", "A", "B", "B − A"])
    drops = side([[f"<code>{esc(r['reason'])}</code>", num(r["a"]), num(r["b"]), _delta(r["a"], r["b"])]
                  for r in cmp["drops"]], ["stage:reason", "A", "B", "B − A"])
    mix = side([[esc(r["bucket"]), num(r["a_tokens"]), num(r["b_tokens"]), _delta(r["a_tokens"], r["b_tokens"]),
                 pct(r["a_share"], 1), pct(r["b_share"], 1)] for r in cmp["mixture"]],
               ["bucket", "A tokens", "B tokens", "B − A", "A share", "B share"])
    sections = [
        section("versions", "Versions", "Which stage versions, layers and config fields differ.", versions),
        section("counts", "Counts per stage", "", figure(plots.get("counts")) + counts),
        section("drops", "Drops by reason", "", figure(plots.get("drops")) + drops if cmp["drops"]
                else '<div class="note">Neither run dropped anything.</div>'),
        section("mixture", "Mixture", "Tokens per domain bucket.", figure(plots.get("mixture")) + mix),
    ]
    return page(f"Comparison · {a['label']} → {b['label']}", header, nav, sections,
                "Written by <code>python -m beam_pipeline report --compare A B</code> from both runs' metrics "
                "and manifests.")


def _delta(a, b) -> str:
    if a is None or b is None:
        return "–"
    d = b - a
    if not d:
        return "0"
    return f'<b>{"+" if d > 0 else "−"}{num(abs(d))}</b>' + (f" ({d / a:+.1%})" if a else "")
