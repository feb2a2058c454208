# Two entry points: `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo docs test test-matrix matrix-venvs main-suite main-suite-e2e main-suite-units lint vscode-test install clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU torch on this disk first: an unpinned torch would pull a CUDA build of GBs.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,sd,docs]'
	# The HTML report's test (tests/test_history.py) opens it in a real browser: Debian's chromium.
	command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || apt-get install -y -q chromium \
		|| echo "note: install chromium (apt-get install -y chromium) for tests/test_history.py"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The docs site into build/site (open build/site/index.html); --strict: a broken link or
# anchor, or a page of docs/ missing from mkdocs.yml's nav, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check raydbg sd_reference tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports  # the layers: [tool.importlinter] in pyproject.toml, docs/architecture.md
	$(BIN)/python -m raydbg.schema_gen --check  # docs/records.md, vscode-ext/src/records.generated.ts

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
	# setuptools: the e2e tests pip-install a trainer package (--no-build-isolation): a 3.12+
	# venv comes without it, 3.10's has one without bdist_wheel (built in from 70.1).
	.venv-$*/bin/pip install -q -e . 'ray[default,data,train]==$(RAY_$*)' \
		'pytest==8.4.2' 'pytest-timeout==2.4.0' 'pytest-asyncio==1.5.0' 'setuptools>=70.1'
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

# `make test` runs the main suite in two parts side by side, most end-to-end tests (tests/e2e:
# mostly waiting on Ray clusters) and the rest with E2E_BESIDE_UNITS, and the version matrix after the rest: its
# venvs install first (~1 min each), then its entries one after another. A part's results
# are main-<part>.xml (version_matrix.py reads them as one column). The parts share this
# machine, so each side gets its own folders for what raydbg keeps per machine (a node's
# memory reservations, progress and stacks records), and the matrix its own HOME (Ray's
# token file, another Ray version's); Ray's token is made before either starts a cluster (two
# clusters starting at once would each write one). The side's output is build/matrix/side.log,
# printed at the end with docs/support.md rendered; `make test` fails when any part failed.
# The end-to-end modules that run beside the unit tests instead, so that both sides end about
# together (the side runs the version matrix after them): the SD app's, memory, telemetry
# exporters, VS Code, the gateway's fuzzing and relays.
E2E_BESIDE_UNITS := $(addprefix tests/e2e/,test_sd_cluster.py test_sd_pipeline.py \
	test_memory_e2e.py test_benchmark_gate_cost.py \
	test_telemetry_otlp_grpc.py test_telemetry_otlp_ray.py test_tui_breakpoints_e2e.py \
	test_fuzz_gateway.py test_gateway_attach.py test_dap_relay_e2e.py test_vscode_integration.py)
E2E_OWN_PART := $(filter-out $(E2E_BESIDE_UNITS),$(wildcard tests/e2e/test_*.py))

main-suite-e2e: $(STAMP)
	$(BIN)/python -m pytest -q -rs --durations=15 --junitxml=$(MATRIX_RESULTS)/main-e2e.xml tests/e2e \
		$(addprefix --ignore=,$(E2E_BESIDE_UNITS))

main-suite-units: $(STAMP)
	$(BIN)/python -m pytest -q -rs --durations=10 --junitxml=$(MATRIX_RESULTS)/main-units.xml tests \
		$(addprefix --ignore=,$(E2E_OWN_PART))

own_folders = RAYDBG_RUN_DIR=$(CURDIR)/$(MATRIX_RESULTS)/$(1)/tasks RAYDBG_PROGRESS_BASE=$(CURDIR)/$(MATRIX_RESULTS)/$(1) \
	RAYDBG_STACKS_DIR=$(CURDIR)/$(MATRIX_RESULTS)/$(1)
MATRIX_PYTHONS = PY310=$(PY310) PY312=$(PY312) PY313=$(PY313)

test: $(STAMP) lint docs vscode-test
	@rm -rf $(MATRIX_RESULTS); mkdir -p $(MATRIX_RESULTS)/units $(MATRIX_RESULTS)/matrix/home
	$(BIN)/python tests/version_matrix.py versions > $(MATRIX_RESULTS)/main.json
	$(BIN)/ray get-auth-token --generate > /dev/null
	@( $(MAKE) --no-print-directory matrix-venvs; venvs=$$?; \
	   $(call own_folders,units) $(MAKE) --no-print-directory main-suite-units; units=$$?; \
	   matrix=1; test $$venvs -eq 0 && { HOME=$(CURDIR)/$(MATRIX_RESULTS)/matrix/home $(call own_folders,matrix) \
	     $(MAKE) --no-print-directory test-matrix $(MATRIX_PYTHONS); matrix=$$?; }; \
	   echo "side: venvs rc $$venvs, main suite (units) rc $$units, matrix rc $$matrix"; \
	   test $$venvs -eq 0 -a $$units -eq 0 -a $$matrix -eq 0 ) > $(MATRIX_RESULTS)/side.log 2>&1 & side=$$!; \
	$(MAKE) --no-print-directory main-suite-e2e; rc=$$?; \
	wait $$side; src=$$?; \
	echo "---- the main suite's other tests and the version matrix ($(MATRIX_RESULTS)/side.log) ----"; \
	cat $(MATRIX_RESULTS)/side.log; \
	$(PY) tests/version_matrix.py render $(MATRIX_RESULTS) > docs/support.md; \
	test $$rc -eq 0 || { echo "the main suite's end-to-end tests failed"; exit $$rc; }; \
	test $$src -eq 0 || { echo "the main suite's other tests or the version matrix failed"; exit 1; }

clean:
	rm -rf $(VENV) $(addprefix .venv-,$(MATRIX)) $(MATRIX_RESULTS)
