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

demo: $(STAMP)
	MPLBACKEND=Agg $(PY) examples/solvsys.py --out demo_output
	MPLBACKEND=Agg $(PY) examples/search_rosenbrock.py --out demo_output
	@echo "plots written to demo_output/"

test: $(STAMP)
	$(PY) -m ruff check src tests examples benchmarks
	$(PY) -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(PY) benchmarks/replica_exchange.py

clean:
	rm -rf $(VENV) demo_output .pytest_cache
