"""Every figure of the run report, recounted from the Parquet files the stages wrote.

The report reads the run's counters (``metrics.json``, the ledgers). These
tests recount each figure it shows from the data itself, never from a
counter: the ingest documents and verbatim repeats, the dead letters, the
scoring stages' annotation rows, select's decisions and gold text, the
dataset's shard indexes and token files, and (for the token estimates) the
sample's tokenizer run over the dropped documents' text. The page is parsed as
a reader sees it: the header figures (``data-kpi``), the tables
(``data-table``), the sample sections (``data-sample``); what the plots draw is
checked in the gathered numbers they are drawn from, and every plot is checked
for labels drawn on top of each other.
"""
from __future__ import annotations

import glob
import html.parser
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from beam_pipeline.report import locate, plot_names, plot_style, plots, write_report
from beam_pipeline.report.gather import gather
from beam_pipeline.report.stage_counts import stage_flow
from tests.conftest import SAMPLE_CONFIG

BUDGET = {"target_tokens": 20_000_000, "mixture": {"docs": 5, "encyclopedic": 3, "legal": 2}}
#: The sample's cascade as it runs: the scorers, with dedup in the seed's place (docs/filters.md)
SCORERS = ("language", "heuristics", "blocklist", "exact_dedup", "near_dedup", "quality", "safety", "pii",
           "decontamination")


def read_layer(root: str, stage: dict, output: str, columns: list[str] | None = None) -> pa.Table:
    paths = sorted(glob.glob(os.path.join(root, "layers", stage["name"], stage["layer_key"], output, "*.parquet")))
    assert paths, (stage["name"], output)
    return pa.concat_tables(pq.read_table(p, columns=columns) for p in paths)


def dead_letters(root: str, stage: dict) -> pa.Table | None:
    paths = sorted(glob.glob(os.path.join(root, "dead_letter", stage["name"], stage["layer_key"], "*.parquet")))
    tables = [pq.read_table(p, columns=["source"]) for p in paths]
    return pa.concat_tables(tables) if tables else None


@pytest.fixture(scope="module")
def truth(built) -> dict:
    """The figures, recounted from the layers' and the dataset's files."""
    root, stages = built["root"], built["stages"]
    docs = read_layer(root, stages["ingest"], "documents", ["doc_id", "source", "content_hash", "n_chars", "text"])
    repeats = read_layer(root, stages["ingest"], "repeats", ["doc_id", "source"])
    decisions = read_layer(root, stages["select"], "decisions", ["doc_id", "source", "kept", "reason"])
    gold = read_layer(root, stages["select"], "gold", ["doc_id", "source"])
    dataset = built["dataset"]
    index = {os.path.basename(p)[:-len(".idx.parquet")]: pq.read_table(p)
             for p in sorted(glob.glob(os.path.join(dataset, "shards", "*.idx.parquet")))}
    domain_of = {s["name"]: s["domain"] for s in built["manifest"]["config"]["sources"]}
    seq_len = built["manifest"]["config"]["tokenize"]["seq_len"]
    dead = {name: dead_letters(root, stage) for name, stage in stages.items()}
    dead = {name: Counter(t["source"].to_pylist()) for name, t in dead.items() if t is not None and t.num_rows}

    read_by_source = Counter(docs["source"].to_pylist()) + Counter(repeats["source"].to_pylist()) + \
        dead.get("ingest", Counter())
    dropped = defaultdict(Counter)  # "<stage>:<reason>" -> {source: records}
    for source in repeats["source"].to_pylist():
        dropped["ingest:repeated_record"][source] += 1
    for row in decisions.filter(pc.invert(decisions["kept"])).to_pylist():
        dropped[f"select:{row['reason']}"][row["source"]] += 1
    for stage, by_source in dead.items():
        dropped[f"{stage}:dead_letter"].update(by_source)
    scored = {name: read_layer(root, stages[name], "annotations", ["doc_id"])["doc_id"].to_pylist()
              for name in SCORERS}
    reason_of = {row["doc_id"]: row["reason"] for row in decisions.to_pylist()}
    all_ids = set(docs["doc_id"].to_pylist())
    shards = {}
    for name, table in index.items():
        shards[name] = {"domain": name.rsplit("-", 3)[0], "documents": table.num_rows,
                        "tokens": sum(table["token_count"].to_pylist()) + table.num_rows,
                        "sequences": os.path.getsize(os.path.join(dataset, "shards", f"{name}.bin")) // (seq_len * 2),
                        "bytes": os.path.getsize(os.path.join(dataset, "shards", f"{name}.bin"))
                        + os.path.getsize(os.path.join(dataset, "shards", f"{name}.idx.parquet"))}
        assert {domain_of[s] for s in table["source"].to_pylist()} <= {shards[name]["domain"]}
    tokens_by_domain = Counter()
    documents_by_domain = Counter()
    for table in index.values():
        for source, count in zip(table["source"].to_pylist(), table["token_count"].to_pylist()):
            tokens_by_domain[domain_of[source]] += count + 1
            documents_by_domain[domain_of[source]] += 1
    return {
        "docs": docs, "repeats": repeats, "decisions": decisions, "gold": gold, "index": index,
        "records_read": sum(read_by_source.values()), "read_by_source": read_by_source,
        "documents": sum(t.num_rows for t in index.values()),
        "tokens": sum(s["tokens"] for s in shards.values()), "sequences": sum(s["sequences"] for s in shards.values()),
        "dropped": dropped, "dead": dead, "scored": scored,
        "gated": {name: Counter(reason_of[d] for d in all_ids - set(ids)) for name, ids in scored.items()},
        "shards": shards, "tokens_by_domain": tokens_by_domain, "documents_by_domain": documents_by_domain,
        "seq_len": seq_len, "domain_of": domain_of,
    }


class Figures(html.parser.HTMLParser):
    """What a reader sees: header figures, tables by name, sample sections."""

    def __init__(self):
        super().__init__()
        self.kpis: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.samples: dict[str, tuple[int, int]] = {}
        self._kpi = self._table = self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and "data-kpi" in attrs:
            self._kpi, self._kpi_text = attrs["data-kpi"], []
        elif tag == "b" and self._kpi is not None:
            self._kpi_text = []
        elif tag == "table" and "data-table" in attrs:
            self._table = attrs["data-table"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "details" and "data-sample" in attrs:
            self.samples[attrs["data-sample"]] = (int(attrs["data-shown"]), int(attrs["data-total"]))

    def handle_endtag(self, tag):
        if tag == "b" and self._kpi is not None:
            self.kpis[self._kpi] = "".join(self._kpi_text).strip()
            self._kpi = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._kpi is not None:
            self._kpi_text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def rows_of(figures: Figures, name: str) -> dict[str, dict[str, str]]:
    """{first cell: {header: cell}} of a table."""
    header, *rows = figures.tables[name]
    return {row[0]: dict(zip(header, row)) for row in rows}


def n(text: str) -> int:
    return int(text.replace(",", ""))


def reasons_text(counts: dict) -> str:
    return ", ".join(f"{r} {v:,}" for r, v in sorted(counts.items()) if v) or "–"


@pytest.fixture(scope="module")
def report(built, tmp_path_factory):
    run_dir = os.path.join(built["root"], "runs", built["metrics"]["run_id"])
    path = str(tmp_path_factory.mktemp("figures") / "report.html")
    write_report(run_dir, output=path, report_config=BUDGET)
    figures = Figures()
    figures.feed(open(path, encoding="utf-8").read())
    return figures, gather(locate(run_dir), report_config=BUDGET)


# --- the header ---------------------------------------------------------------

def test_header_figures_are_the_layers(report, truth, built):
    figures, _ = report
    kpi = figures.kpis
    assert n(kpi["records_read"]) == truth["records_read"] == 815
    assert n(kpi["documents"]) == truth["documents"] == truth["gold"].num_rows
    assert n(kpi["tokens"]) == truth["tokens"]
    assert kpi["sequences"] == f"{truth['sequences']:,} × {truth['seq_len']:,}"
    assert n(kpi["shards"]) == len(truth["index"])
    dropped = truth["records_read"] - truth["documents"]
    assert dropped == sum(sum(by_source.values()) for by_source in truth["dropped"].values())
    assert kpi["records_dropped"] == f"{dropped:,} ({dropped / truth['records_read']:.1%})" == "176 (21.6%)"


# --- the cascade ----------------------------------------------------------------

def test_cascade_table_is_the_flow_of_records(report, truth, built):
    figures, _ = report
    rows = rows_of(figures, "cascade")
    docs, gold = truth["docs"].num_rows, truth["gold"].num_rows
    select_drops = {r.split(":", 1)[1]: sum(c.values()) for r, c in truth["dropped"].items() if r.startswith("select:")}
    expected = {  # stage: (in, dropped, dropped by reason, left in the flow, scored, gated by reason)
        "ingest": (truth["records_read"], truth["repeats"].num_rows, {"repeated_record": truth["repeats"].num_rows},
                   docs, None, None),
        **{name: (docs, 0, {}, docs, len(truth["scored"][name]), truth["gated"][name]) for name in SCORERS},
        "select": (docs, docs - gold, select_drops, gold, None, None),
        "ngram_index": (gold, 0, {}, gold, None, None),
        "tokenize": (gold, 0, {}, truth["documents"], None, None),
    }
    assert list(rows) == [s["name"] for s in built["metrics"]["stages"]] == list(expected)
    for stage, (records_in, dropped, reasons, after, scored, gated) in expected.items():
        row = rows[stage]
        assert n(row["in"]) == records_in, stage
        assert n(row["dropped"]) == dropped == sum(reasons.values()), stage
        assert row["dropped by reason (dead letters included)"] == reasons_text(reasons), stage
        assert n(row["left in the flow"]) == after == records_in - dropped, stage
        assert row["scored"] == (f"{scored:,}" if scored is not None else "–"), stage
        gated_cell = row["not scored: gated by rules over earlier stages"]
        assert gated_cell == (reasons_text(gated) if gated is not None else "–"), stage
        if gated is not None:
            assert sum(gated.values()) == docs - scored


def test_funnel_documents_and_tokens_follow_the_records(report, truth, built):
    from tokenizers import Tokenizer

    _, data = report
    steps = data["funnel"]["steps"]
    docs, gold = truth["docs"].num_rows, truth["gold"].num_rows
    flow = [truth["records_read"], docs] + [docs] * len(SCORERS) + [gold, gold, truth["documents"]]
    assert [s["documents"] for s in steps] == flow
    assert [s["scored"] for s in steps] == [None] * 2 + [len(truth["scored"][n]) for n in SCORERS] + [None] * 3
    # tokens: exact for the dataset; before select and before ingest, the dropped documents' real token counts
    # the manifest names the tokenizer relative to the config's folder (no paths of the building machine)
    tokenizer = Tokenizer.from_file(os.path.join(os.path.dirname(SAMPLE_CONFIG), built["manifest"]["config"]["tokenize"]["tokenizer"]))
    text = dict(zip(truth["docs"]["doc_id"].to_pylist(), truth["docs"]["text"].to_pylist()))
    kept = set(truth["gold"]["doc_id"].to_pylist())

    def tokens(ids) -> int:
        return sum(len(e.ids) + 1 for e in tokenizer.encode_batch([text[d] for d in ids], add_special_tokens=False))

    after_ingest = truth["tokens"] + tokens([d for d in text if d not in kept])
    read = after_ingest + tokens(truth["repeats"]["doc_id"].to_pylist())
    assert steps[-1]["tokens"] == steps[-3]["tokens"] == truth["tokens"] and not steps[-1]["estimated"]
    assert steps[1]["tokens"] == pytest.approx(after_ingest, rel=0.05) and steps[1]["estimated"]
    assert steps[0]["tokens"] == pytest.approx(read, rel=0.05)
    for before, after in zip(steps, steps[1:]):  # tokens fall exactly where documents leave the flow
        assert (after["tokens"] < before["tokens"]) == (after["documents"] < before["documents"]), after["label"]


# --- drops by reason and source ---------------------------------------------------

def test_drops_table_and_plot_labels_are_the_dropped_records(report, truth):
    figures, data = report
    rows = rows_of(figures, "drops")
    header = figures.tables["drops"][0]
    sources = header[1:-1]
    assert sources == sorted(truth["read_by_source"])
    reasons = [r for r in rows if ":" in r]
    assert sorted(reasons) == sorted(truth["dropped"])
    for reason in reasons:
        for source in sources:
            assert n(rows[reason][source]) == truth["dropped"][reason][source], (reason, source)
        assert n(rows[reason]["total"]) == sum(truth["dropped"][reason].values())
    for source in sources:
        total = sum(by_source[source] for by_source in truth["dropped"].values())
        read = truth["read_by_source"][source]
        assert n(rows["dropped"][source]) == total
        assert n(rows["records read"][source]) == read
        assert rows["share dropped"][source] == f"{total / read:.1%}"
        assert total <= read
    assert rows["share dropped"]["total"] == "21.6%"
    # the bar labels of the plot
    labels = plots.drop_bar_labels(data)
    for source in sources:
        total = sum(by_source[source] for by_source in truth["dropped"].values())
        read = truth["read_by_source"][source]
        assert labels[source] == f"{total:,} of {read:,} read ({total / read:.1%})"
    assert labels["python-docs-mirror"] == "51 of 51 read (100.0%)"


def test_samples_are_shown_only_for_real_drops_with_their_totals(report, truth):
    figures, data = report
    k = data["settings"]["samples_per_reason"]
    expected = {r: sum(c.values()) for r, c in truth["dropped"].items()}
    assert set(figures.samples) == set(expected)
    for reason, total in expected.items():
        assert figures.samples[reason] == (min(k, total), total), reason


# --- annotations ------------------------------------------------------------------

def test_histograms_recounted_from_the_columns(report, built):
    _, data = report
    for h in data["histograms"]:
        stage, output = h["layer"].split("/")
        column = read_layer(built["root"], built["stages"][stage], output, [h["column"]])[h["column"]]
        values = column.drop_null().to_numpy().astype(np.float64)
        values = values[np.isfinite(values)]
        edges = np.array(h["edges"])
        assert h["n"] == len(values) and h["nulls"] == column.null_count
        assert (h["min"], h["max"]) == (values.min(), values.max())
        assert h["mean"] == pytest.approx(values.mean())
        zeros = int((values < edges[0]).sum()) if h["log"] else 0
        assert h["zeros"] == zeros
        counts = np.histogram(values[values >= edges[0]] if h["log"] else values, bins=edges)[0]
        assert h["counts"] == counts.tolist(), h["layer"] + "." + h["column"]


def test_flags_and_language_recounted(report, built):
    figures, data = report
    rows = figures.tables["flags"][1:]
    assert rows
    for cell, true, of, share in rows:
        stage, output, column = re.fullmatch(r"(\w+)/(\w+)\.(\w+)", cell).groups()
        values = read_layer(built["root"], built["stages"][stage], output, [column])[column].drop_null().to_pylist()
        assert (n(true), n(of), share) == (sum(values), len(values), f"{sum(values) / len(values):.1%}"), cell
    mix = data["language"]
    stage, output = mix["layer"].split("/")
    languages = Counter(read_layer(built["root"], built["stages"][stage], output, [mix["column"]])[mix["column"]]
                        .to_pylist())
    shown = {k: v for k, v in mix["documents"].items() if not k.startswith("other (")}
    assert all(languages[k] == v for k, v in shown.items())
    assert mix["total"] == sum(languages.values()) and mix["languages"] == len(languages)


def test_duplicate_clusters_recounted(report, truth, built):
    figures, _ = report
    rows = rows_of(figures, "clusters")
    by_hash = Counter(truth["docs"]["content_hash"].to_pylist())  # exact copies, straight from the text hashes
    exact = [k for k in by_hash.values() if k > 1]
    row = rows["exact_dedup/annotations"]
    assert (n(row["clusters (2+ members)"]), n(row["documents in them"]), n(row["redundant copies"]),
            n(row["largest"])) == (len(exact), sum(exact), sum(k - 1 for k in exact), max(by_hash.values()))
    near = read_layer(built["root"], built["stages"]["near_dedup"], "annotations", ["cluster_id"])
    members = Counter(c for c in near["cluster_id"].to_pylist() if c is not None)
    multi = [k for k in members.values() if k > 1]
    row = rows["near_dedup/annotations"]
    assert (n(row["clusters (2+ members)"]), n(row["documents in them"]), n(row["redundant copies"])) == (
        len(multi), sum(multi), sum(k - 1 for k in multi))


# --- the dataset ------------------------------------------------------------------

def test_mixture_and_budget_recounted_from_the_shard_indexes(report, truth):
    figures, _ = report
    rows = rows_of(figures, "mixture")
    total = sum(truth["tokens_by_domain"].values())
    weights = BUDGET["mixture"]
    for bucket, tokens in truth["tokens_by_domain"].items():
        row = rows[bucket]
        shards = [s for s in truth["shards"].values() if s["domain"] == bucket]
        share = weights[bucket] / sum(weights.values())
        wanted = BUDGET["target_tokens"] * share
        assert n(row["documents"]) == truth["documents_by_domain"][bucket]
        assert n(row["shards"]) == len(shards)
        assert n(row["unique tokens"]) == tokens == sum(s["tokens"] for s in shards)
        assert row["actual share"] == f"{tokens / total:.1%}"
        assert row["target share"] == f"{share:.1%}"
        assert n(row["tokens wanted"]) == round(wanted)
        assert row["epochs"].rstrip(" ⚠") == f"{wanted / tokens:,.2f}"
        assert row["epochs"].endswith("⚠") == (wanted / tokens > 4)


def test_shard_table_recounted_from_the_shard_files(report, truth):
    figures, _ = report
    rows = rows_of(figures, "shards")
    by_domain = defaultdict(list)
    for shard in truth["shards"].values():
        by_domain[shard["domain"]].append(shard)
    assert set(rows) == set(by_domain)
    for domain, shards in by_domain.items():
        tokens = [s["tokens"] for s in shards]
        row = rows[domain]
        assert (n(row["shards"]), n(row["min tokens"]), n(row["mean tokens"]), n(row["max tokens"]),
                n(row["bytes on disk"])) == (len(shards), min(tokens), round(sum(tokens) / len(tokens)), max(tokens),
                                             sum(s["bytes"] for s in shards))


# --- how the plots are drawn ----------------------------------------------------------

def test_every_named_section_has_its_plot_and_naming_needs_no_matplotlib():
    assert tuple(plots.SECTIONS) == plot_names.SECTION_NAMES
    assert plot_names.plot_names({"histograms": [{}, {}]}) == [*plot_names.SECTION_NAMES, "hist-0", "hist-1"]
    assert [plot_names.histogram_index(n) for n in ("funnel", "hist-0", "hist-12")] == [None, 0, 12]
    # the job lists its plot tasks and writes the page with these: only the drawing workers load matplotlib
    probe = "import sys, beam_pipeline.report.plot_names, beam_pipeline.report.html; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_no_plot_draws_labels_on_top_of_each_other_and_drop_colors_are_distinct(report):
    _, data = report
    with plot_style.checking_overlaps():
        drawn = plots.run_plots(data)
    every = [p for v in drawn.values() for p in (v if isinstance(v, list) else [v]) if p is not None]
    assert len(every) == 7 + len(data["histograms"]) - 1
    assert all(p.overlaps is not None for p in every)  # each was looked at
    assert {p.id: p.overlaps for p in every if p.overlaps} == {}
    assert plots.draw("funnel", data).overlaps is None  # a build's report does not look
    colors = plot_style.palette_for(data)
    reasons = sorted({r for per in data["drops_by_source"].values() for r in per})
    assert len({colors("reason", r) for r in reasons}) == len(reasons)


def test_many_drop_reasons_fold_into_other_instead_of_repeating_colors():
    names = [f"stage{i}:reason{i}" for i in range(30)]
    shown, folded = plot_style.fold_categories(names, {name: i for i, name in enumerate(names)})
    assert len(shown) == len(plot_style.COLORS) - 1 and len(folded) == 30 - len(shown)
    assert shown == names[30 - len(shown):]  # the largest keep their color, in their order
    assert plot_style.fold_categories(names[:5], {}) == (names[:5], [])


def test_stage_flow_reads_drops_and_gates_from_the_counts():
    def stage(name, records_in, passed, filtered, dead=0):
        return {"name": name, "in": records_in, "passed": passed, "filtered": filtered, "dead_letter": dead,
                "by_source": {"s": {"in": records_in, "passed": passed, "filtered": filtered, "dead_letter": dead}}}

    stages = [stage("ingest", 100, 90, {"repeated_record": 8}, dead=2),
              stage("scorer", 90, 80, {"exact_duplicate": 9}, dead=1),  # gates 9, dead-letters 1: 89 go on
              stage("select", 89, 70, {"exact_duplicate": 9, "low_quality": 10}),
              stage("tokenize", 70, 70, {})]
    assert stage_flow(stages) == []
    assert [s["kind"] for s in stages] == ["drops", "scores", "drops", "drops"]
    assert [s["dropped"] for s in stages] == [{"dead_letter": 2, "repeated_record": 8}, {"dead_letter": 1},
                                              {"exact_duplicate": 9, "low_quality": 10}, {}]
    assert stages[1]["gated"] == {"exact_duplicate": 9} and stages[1]["scored"] == 80
    assert [s["after"] for s in stages] == [90, 89, 70, 70]
    assert sum(s["dropped_total"] for s in stages) == 100 - 70
    broken = [stage("a", 10, 8, {"x": 2}), stage("b", 7, 7, {})]
    assert stage_flow(broken) == ["stage a: 10 in, 8 passed, 2 filtered, 0 dead letters, but the next stage reads 7",
                                  "stage a (s): 10 in - 2 dropped != 7 read by the next stage"]
    assert broken[0]["kind"] == "drops" and math.isfinite(broken[0]["dropped_total"])


def test_counts_that_do_not_add_up_are_a_warning_on_the_page(built, tmp_path):
    """A run whose dataset holds other documents than its counts leave says so in its warnings."""
    import shutil

    root = str(tmp_path / "out")
    shutil.copytree(built["root"], root)
    (metrics_path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    metrics = json.load(open(metrics_path))
    ingest = metrics["stages"][0]["counts"]
    ingest["in"] += 5
    ingest["filtered"]["repeated_record"] += 5
    ingest["by_source"]["wikipedia"]["in"] += 5
    ingest["by_source"]["wikipedia"]["filtered"]["repeated_record"] = 5
    json.dump(metrics, open(metrics_path, "w"))
    data = gather(locate(os.path.dirname(metrics_path)), detail=False)
    assert data["run"]["records_dropped"] == 181 and data["warnings"] == []  # the counts agree with each other
    ingest["passed"] -= 1  # ... and now they do not
    json.dump(metrics, open(metrics_path, "w"))
    data = gather(locate(os.path.dirname(metrics_path)), detail=False)
    assert data["warnings"] == ["stage ingest: 820 in != 767 passed + 52 filtered + 0 dead letters"]
    metrics["stages"][1]["counts"]["in"] -= 2  # language reads 2 records fewer than ingest passed on
    json.dump(metrics, open(metrics_path, "w"))
    page = open(write_report(os.path.dirname(metrics_path)), encoding="utf-8").read()
    warnings = re.findall(r"<li>(stage [^<]*)</li>", page)
    assert warnings == ["stage ingest: 820 in != 767 passed + 52 filtered + 0 dead letters",
                        "stage ingest: 820 in, 767 passed, 52 filtered, 0 dead letters, but the next stage reads 766",
                        "stage language: 766 in != 768 passed + 0 filtered + 0 dead letters",
                        "stage language: 766 in, 768 passed, 0 filtered, 0 dead letters, but the next stage reads 768"]
