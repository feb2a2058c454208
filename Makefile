# Two entry points: `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-py312 lint vscode-test install clean

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
	$(BIN)/lint-imports  # the layers: [tool.importlinter] in pyproject.toml, docs/architecture.md

vscode-test:
	cd vscode-ext && npm ci --no-audit --no-fund && npm test

# Python 3.12: armed breakpoints' sys.monitoring layer, in a second, light venv (raydbg
# without the SD extra). PY312=/path/to/python3.12 overrides the search.
PY312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
VENV312 := .venv312
STAMP312 := $(VENV312)/.installed
PY312_TESTS := tests/test_breakpoints_model.py tests/test_breakpoints_layers.py tests/test_breakpoints_store.py \
	tests/e2e/test_armed_breakpoints.py

$(STAMP312): pyproject.toml setup.py
	@test -n "$(PY312)" || { echo "python3.12 not found: set PY312=/path/to/python3.12"; exit 1; }
	test -x $(VENV312)/bin/python || $(PY312) -m venv $(VENV312)
	$(VENV312)/bin/pip install -q -e . 'pytest==8.4.2' 'pytest-timeout==2.4.0' 'pytest-asyncio==1.5.0'
	touch $(STAMP312)

test-py312: $(STAMP312)
	$(VENV312)/bin/python -m pytest -q -p no:cacheprovider $(PY312_TESTS)

# npm ci first: the Python tests of the extension need its node_modules.
test: $(STAMP) lint vscode-test
	$(BIN)/python -m pytest -q -rs --durations=20 tests
	$(MAKE) test-py312

clean:
	rm -rf $(VENV) $(VENV312)
