# Every target works on a fresh clone: the first one that needs the virtualenv creates it.
# the interpreter the virtualenv is made from: an optimised build when the machine has one
# (scripts/pick_python.sh says why); `make PYTHON=/path/to/python3 ...` chooses another
PYTHON ?= $(shell sh scripts/pick_python.sh)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# a .venv made from another interpreter than $(PYTHON) is made again (pyvenv.cfg names it)
VENV_PYTHON := $(realpath $(shell sed -n 's/^executable = //p' $(VENV)/pyvenv.cfg 2>/dev/null))
WANT_PYTHON := $(shell $(PYTHON) -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
REBUILD_VENV := $(and $(VENV_PYTHON),$(WANT_PYTHON),$(filter-out $(WANT_PYTHON),$(VENV_PYTHON)))

.PHONY: FORCE quickstart dev-manifests demo test lint typecheck check protos crds bench bench-quick clean images docs e2e chaos soak

$(STAMP): pyproject.toml $(if $(REBUILD_VENV),FORCE)
	@if [ -n "$(REBUILD_VENV)" ]; then \
		echo "$(VENV) was made from $(VENV_PYTHON), not $(WANT_PYTHON): making it again"; \
		rm -rf $(VENV); \
	fi
	@echo "virtualenv $(VENV) from $(PYTHON) ($$($(PYTHON) -V 2>&1))"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev]'
	touch $(STAMP)

quickstart: $(STAMP)  ## local cluster with kruntimes, a task Run, the KRM and Bash functions (README)
	$(BIN)/python examples/quickstart.py

dev-manifests: $(STAMP)  ## re-render src/krt/cli/dev_manifests from charts/ (what `krt dev up` installs)
	$(BIN)/python tests/quickstart/render_dev_manifests.py

demo: $(STAMP)  ## Runtime Servers only, no cluster: register and invoke the examples over gRPC
	$(BIN)/python examples/demo.py

test: $(STAMP)  ## the whole test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

protos: $(STAMP)  ## regenerate src/krt/proto from protos/
	$(BIN)/python scripts/gen_protos.py

crds: $(STAMP)  ## regenerate charts/kruntimes/crds from src/krt/api/schema.py
	$(BIN)/python scripts/gen_crds.py

docs: $(STAMP)  ## regenerate docs/api-reference.md from the CRDs (tests/docs checks it)
	$(BIN)/python scripts/gen_api_docs.py

e2e: $(STAMP)  ## end-to-end tests on a kind cluster (needs kind, docker, kubectl, helm; see docs/e2e.md)
	$(BIN)/python -m pytest -v -rs tests/e2e

images:  ## build the five container images (needs Docker; see images/build.sh)
	bash images/build.sh

bench: $(STAMP)  ## every benchmark in bench/, one table in docs/benchmarks.md (BENCH_NOTE="..." adds a note)
	$(BIN)/python bench/report.py --note "$(BENCH_NOTE)"

bench-quick: $(STAMP)  ## the same with short runs (each benchmark's --quick), report on stdout
	$(BIN)/python bench/report.py --quick --output - --note "$(BENCH_NOTE)"

chaos: $(STAMP)  ## the chaos suite at full size: every fault under load on localkube, figures printed
	KRT_CHAOS_FULL=1 $(BIN)/python -m pytest -s -q -m chaos tests/chaos

soak: $(STAMP)  ## 10 minutes at 80% of peak invoke throughput, a fault a minute, RSS per daemon (SOAK_ARGS="--minutes 1")
	$(BIN)/python bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

FORCE:
