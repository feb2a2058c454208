# Two entry points: `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-matrix matrix-venvs main-suite lint vscode-test install clean

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

# The version matrix (docs/support.md): each entry a light venv (raydbg without the SD extra)
# on one Ray and one Python, running only the tests that touch Ray internals or differ by
# version (tests/version_matrix.py names them); the main suite stays on .venv (3.11, Ray
# 2.60). PY310=/PY312=/PY313=/path/to/python3.x override where the Pythons are found.
find_python = $(shell for p in python$(1) $$HOME/.pyenv/versions/$(1).*/bin/python$(1); do \
	$$p -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
PY310 ?= $(call find_python,3.10)
PY312 ?= $(call find_python,3.12)
PY313 ?= $(call find_python,3.13)
MATRIX ?= ray251-py310 ray255-py313 ray260-py312
RAY_ray251-py310 := 2.51.2
PYTHON_ray251-py310 = $(PY310)
RAY_ray255-py313 := 2.55.1
PYTHON_ray255-py313 = $(PY313)
RAY_ray260-py312 := 2.60.0
PYTHON_ray260-py312 = $(PY312)
IDS_ray260-py312 := --python-only  # the main suite's Ray: only what differs by Python
MATRIX_RESULTS := build/matrix

.PRECIOUS: .venv-%/.installed
.venv-%/.installed: pyproject.toml setup.py
	@test -n "$(RAY_$*)" || { echo "no matrix entry $*: one of $(MATRIX)"; exit 1; }
	@test -n "$(PYTHON_$*)" || { echo "no Python for $*: set PY3xx=/path/to/python3.x"; exit 1; }
	test -x .venv-$*/bin/python || $(PYTHON_$*) -m venv .venv-$*
	# No torch: the registry has only CUDA builds (GBs) for these Pythons; Train's torch
	# tests skip there and docs/support.md says so.
	.venv-$*/bin/pip install -q -e . 'ray[default,data,train]==$(RAY_$*)' \
		'pytest==8.4.2' 'pytest-timeout==2.4.0' 'pytest-asyncio==1.5.0'
	touch $@

# One entry: its results (JUnit XML, versions) in build/matrix/ and its wall time.
test-matrix-%: .venv-%/.installed
	@mkdir -p $(MATRIX_RESULTS)
	.venv-$*/bin/python tests/version_matrix.py versions > $(MATRIX_RESULTS)/$*.json
	@start=$$(date +%s); \
	.venv-$*/bin/python -m pytest -q -rs -p no:cacheprovider --junitxml=$(MATRIX_RESULTS)/$*.xml \
		$$(.venv-$*/bin/python tests/version_matrix.py ids $(IDS_$*)); rc=$$?; \
	echo "matrix $*: $$(( $$(date +%s) - start )) s wall, rc $$rc"; exit $$rc

# All entries (each runs even when one before it failed), then docs/support.md from what
# they ran (stdlib only); fails when any entry failed.
test-matrix:
	@rc=0; for entry in $(MATRIX); do $(MAKE) --no-print-directory test-matrix-$$entry || rc=1; done; \
	$(PY) tests/version_matrix.py render $(MATRIX_RESULTS) > docs/support.md; \
	echo "docs/support.md rendered from $(MATRIX_RESULTS)"; exit $$rc

# The matrix's venvs, one after another (each `pip install -e .` writes the checkout's
# egg-info).
matrix-venvs: $(foreach entry,$(MATRIX),.venv-$(entry)/.installed)

# The main suite on .venv (3.11, Ray 2.60); npm ci first: the Python tests of the
# extension need its node_modules.
main-suite: $(STAMP) lint vscode-test
	@mkdir -p $(MATRIX_RESULTS)
	$(BIN)/python tests/version_matrix.py versions > $(MATRIX_RESULTS)/main.json
	$(BIN)/python -m pytest -q -rs --durations=20 --junitxml=$(MATRIX_RESULTS)/main.xml tests

# The version matrix runs in the background meanwhile: its venvs install (~1 min each), then
# its entries, one after another, while lint, the extension tests and the main suite run
# in the foreground (a matrix entry's tests mostly wait on Ray: ~0.4 core). Its own HOME
# (Ray's token file) and raydbg's own record folders keep the two apart: a node's records
# (memory reservations, progress, stacks) are per machine, and the two runs' clusters are
# on one machine. Its output is build/matrix/matrix.log, printed at the end, and
# docs/support.md is rendered once both are done; `make test` fails when either failed.
MATRIX_ISOLATION = HOME=$(CURDIR)/$(MATRIX_RESULTS)/home RAYDBG_RUN_DIR=$(CURDIR)/$(MATRIX_RESULTS)/tasks \
	RAYDBG_PROGRESS_BASE=$(CURDIR)/$(MATRIX_RESULTS)/run RAYDBG_STACKS_DIR=$(CURDIR)/$(MATRIX_RESULTS)/run

test: $(STAMP)
	@rm -rf $(MATRIX_RESULTS); mkdir -p $(MATRIX_RESULTS)/home $(MATRIX_RESULTS)/run
	@( $(MAKE) --no-print-directory matrix-venvs && \
	   $(MATRIX_ISOLATION) $(MAKE) --no-print-directory test-matrix PY310=$(PY310) PY312=$(PY312) PY313=$(PY313) \
	 ) > $(MATRIX_RESULTS)/matrix.log 2>&1 & matrix=$$!; \
	$(MAKE) --no-print-directory main-suite; rc=$$?; \
	wait $$matrix; mrc=$$?; \
	echo "---- the version matrix ($(MATRIX_RESULTS)/matrix.log) ----"; cat $(MATRIX_RESULTS)/matrix.log; \
	$(PY) tests/version_matrix.py render $(MATRIX_RESULTS) > docs/support.md; \
	test $$rc -eq 0 || { echo "the main suite failed"; exit $$rc; }; \
	test $$mrc -eq 0 || { echo "the version matrix failed"; exit 1; }

clean:
	rm -rf $(VENV) $(addprefix .venv-,$(MATRIX)) $(MATRIX_RESULTS)
