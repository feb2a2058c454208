# Two entry points: `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint vscode-test install clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU torch on this disk first: an unpinned torch would pull a CUDA build of GBs.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,sd]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check raydbg sd_reference tests examples benchmarks
	$(BIN)/mypy

vscode-test:
	cd vscode-ext && npm ci --no-audit --no-fund && npm test

# npm ci first: the Python tests of the extension need its node_modules.
test: $(STAMP) lint vscode-test
	$(BIN)/python -m pytest -q --durations=20 tests

clean:
	rm -rf $(VENV)
