# The README's two commands. Each does all of its own set-up on a fresh machine with Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export REELQUEUE_HOME ?= $(CURDIR)/.reelqueue

.PHONY: demo test test-fast fault-checks install lint lock secrets image bench bench-run bench-webhooks bench-fetch bench-pipeline bench-capacity bench-api bench-streams chaos down

# Python 3.11+ (README, "Platforms"). The versions come from requirements.lock (`make lock` after
# editing pyproject.toml); the package itself goes in editable, without resolving anything again.
$(VENV)/.installed: pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
	  echo "reelqueue needs Python 3.11 or newer; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)." \
	       "Run with one, e.g. make $(MAKECMDGOALS) PYTHON=python3.12" >&2; exit 2; }
	@echo "installing into $(VENV) (log: $(VENV)/install.log) ..." >&2
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/pip install -r requirements.lock && $(BIN)/pip install --no-deps -e '.[embedded,test]'; } \
	  > $(VENV)/install.log 2>&1 || { tail -30 $(VENV)/install.log >&2; exit 1; }
	@touch $@

install: $(VENV)/.installed

# requirements.lock: every platform's pins (uv's universal resolution) of the runtime and the
# embedded and test extras; CI and `make install` install exactly these.
lock: install
	$(BIN)/pip install -q 'uv>=0.5'
	$(BIN)/uv pip compile pyproject.toml --extra embedded --extra test --universal \
	  --python-version 3.11 -o requirements.lock

demo: install
	$(BIN)/reelqueue demo

# Random secrets for docker compose in .env (mode 0600; usable values already there are kept).
secrets: install
	$(BIN)/reelqueue secrets init --env-file .env

# The image of docker/Dockerfile, for your registry (docs/deploy.md, "Kubernetes"; needs a Docker engine):
#   make image IMAGE=registry.example.com/reelqueue TAG=$$(git rev-parse --short HEAD)
IMAGE ?= reelqueue
TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	docker build -f docker/Dockerfile -t $(IMAGE):$(TAG) .

down: install
	$(BIN)/reelqueue dev down

lint: install
	$(BIN)/ruff check .

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
# Five pytest-xdist processes (TEST_WORKERS=1 for one), each with its own embedded stack on its own
# ports, a test file at a time: most of the suite waits on real time (jobs, leases, timers), so
# more processes than cores share the cores better: two kept the 2 cores 43 % busy (18 min),
# four 74-82 % (12.7 min), five 90 % (9.7 min) (docs/performance.md, "The test suite"). The files
# marked `long` go out first (tests/conftest.py), not the ones with the most tests (xdist's default
# order), which started the longest file near the end.
TEST_WORKERS ?= 5
test: install lint
	$(BIN)/pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder tests

# The tests that need no embedded stack: pure logic (tests/unit) and the workflows on the
# time-skipping server with fake activities, and the replay of recorded histories (tests/workflow).
test-fast: install lint
	$(BIN)/pytest -q -p no:cacheprovider --durations=5 -n 3 --dist loadfile --no-loadscope-reorder \
	  tests/unit tests/workflow

# Each timing-sensitive integration test run on a copy of the tree with the code it covers broken
# on purpose: exit 1 unless every one fails at its check (bench/fault_checks.py, tests/README.md).
# `make fault-checks ARGS="--only rate-off-by-one --jobs 1"`; each run starts its own stack.
fault-checks: install
	$(BIN)/python -m bench.fault_checks $(ARGS)

bench: install
	$(BIN)/python -m bench.import_bench $(ARGS)

# `make bench-run ARGS="start --tasks 100000"` or ARGS="complete --tasks 300"
bench-run: install
	$(BIN)/python -m bench.run_bench $(ARGS)

bench-webhooks: install
	$(BIN)/python -m bench.webhook_bench $(ARGS)

# `make bench-fetch ARGS="--mb 500 --runs 3"`: the output fetcher against curl on loopback
bench-fetch: install
	$(BIN)/python -m bench.fetch_bench $(ARGS)

# `make bench-pipeline ARGS="--tasks 100"`: engine ceiling vs pipeline, CPU per task by process
bench-pipeline: install
	$(BIN)/python -m bench.pipeline $(ARGS)

# `make bench-api ARGS="--creates 500"`: POST /v1/generations per second and latency at concurrency 1/8/32
bench-api: install
	$(BIN)/python -m bench.api_bench $(ARGS)

# `make bench-streams ARGS="--streams 1000,5000,10000"`: open SSE streams on one gateway process:
# memory per stream, CPU idle and at 42 events/s, delivery latency, Postgres transactions/s
bench-streams: install
	$(BIN)/python -m bench.stream_bench $(ARGS)

# `make bench-capacity ARGS="--rate 3 --minutes 5"` (seed 002's peak; about 15 minutes)
bench-capacity: install
	$(BIN)/python -m bench.capacity $(ARGS)

# `make chaos ARGS="--tasks 200"`: tasks through worker SIGKILLs, restarts of Postgres, S3, Temporal and
# the gateway, and provider faults at rates (docs/reliability.md, "Chaos run"); exit 1 on a violated invariant.
# With ARGS="--json" stdout is the JSON report alone (the install's messages go to stderr).
chaos: install
	@$(BIN)/python -m bench.chaos $(ARGS)
