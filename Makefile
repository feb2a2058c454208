# Two entry points: `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check raydbg sd_reference tests examples benchmarks
	$(BIN)/mypy

test: $(STAMP)
	$(BIN)/ruff check raydbg sd_reference tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV)
