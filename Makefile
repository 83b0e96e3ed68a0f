# `make demo` and `make test` create .venv and install the package on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The flagship: simulate an EHT 2017 observation of an xringaus Sgr A*, fit it back with
# ReplicaExchange on the CPU (about a minute), print truth / best / median / 68 % interval, plot.
demo: $(STAMP)
	MPLBACKEND=Agg JAX_PLATFORMS=cpu $(VENV)/bin/multiwalk demo --out demo_output
	@echo "plots and the simulated sgra_uvdata.txt written to demo_output/"

test: $(STAMP)
	$(PY) -m ruff check src tests examples benchmarks
	$(PY) -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(PY) benchmarks/replica_exchange.py

clean:
	rm -rf $(VENV) demo_output .pytest_cache
