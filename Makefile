# jobsvc: local development entry points. GNU make, bash.
#
#   make bootstrap    what running needs: system packages (apt), .venv, the runtime lock; idempotent
#   make run          the local stack with the API and workers (data kept in .state/)
#   make test         lint, then pytest against a throwaway stack of real servers
#   make unit         the unit tier alone: pure logic, no servers, in seconds
#   make lint         ruff check + ruff format --check + no development history in the tree
#   make lock         recompile the lock files (requirements/*.txt) from pyproject.toml and requirements/dev.in
#   make check-deploy docker-compose.yml, Dockerfile, Prometheus rules, Grafana dashboards (no servers)
#   make bench        the benchmark suite on a throwaway stack (ARGS='--quick' for a short run)
#   make chaos        the fault campaign on a throwaway stack (ARGS='--replicas 1 --seed N')
#   make clean        caches; keeps .venv and the local data
#   make clean-state  delete .state/: ALL local data, logs and secrets (no confirmation)
#
# Extra arguments: make run ARGS='--shards 8 --api-port 8001'   make test ARGS='-k jobs -x'

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

VENV := .venv
PYTHON := $(VENV)/bin/python
# Every dependency is locked with its hashes: requirements/runtime.txt is what running
# needs (pyproject.toml's dependencies), requirements/dev.txt adds the test, lint and
# benchmark tools (requirements/dev.in). pip runs again only when a lock file changes after
# its stamp.
PIP_INSTALL := $(PYTHON) -m pip install --disable-pip-version-check --require-hashes
RUNTIME_STAMP := $(VENV)/.runtime-installed
DEV_STAMP := $(VENV)/.dev-installed
KAFKA_POM := tools/devstack/kafka.pom.xml
KAFKA_STAMP := $(VENV)/.kafka-fetched
# Debian packages the stack needs: PostgreSQL server binaries, ZooKeeper (and the Java
# runtime it and Kafka run on), Maven (fetches the Kafka broker), the venv module Debian
# ships separately from python3, and Prometheus (`make run` starts one; the tests run its
# `promtool` on the alert rules).
APT_PACKAGES := postgresql zookeeper default-jre-headless maven python3-venv prometheus
# Debian packages only the tests and the fault campaign need: Chromium with its WebDriver
# (the admin's cluster page is tested in a headless browser); iptables and gcc, with which
# the fault campaign cuts links and builds its clock shim (its short run is part of
# `make test`).
TEST_APT_PACKAGES := chromium chromium-driver iptables gcc libc6-dev
# Debian packages only the benchmarks need: wrk generates the API load; redis-server is
# the broker of Celery, one of the peers the `peers` scenario measures beside jobsvc.
BENCH_APT_PACKAGES := wrk redis-server
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
ARGS ?=

# Installs the Debian packages named in $(1) that are missing (dpkg is asked, no network).
define apt_install
	@missing=(); \
	for package in $(1); do \
	  status=$$(dpkg -s "$$package" 2>/dev/null || true); \
	  [[ $$status == *"Status: install ok installed"* ]] || missing+=("$$package"); \
	done; \
	if (( $${#missing[@]} )); then \
	  echo "Installing Debian packages: $${missing[*]}"; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends "$${missing[@]}"; \
	fi
endef

.PHONY: help bootstrap bootstrap-dev system-packages test-system-packages run test unit lint \
	lock check-deploy bench chaos clean clean-state

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

bootstrap: system-packages $(RUNTIME_STAMP) $(KAFKA_STAMP)

# What the tests, the linters and the benchmarks need besides.
bootstrap-dev: bootstrap $(DEV_STAMP)

system-packages:
	$(call apt_install,$(APT_PACKAGES))

test-system-packages:
	$(call apt_install,$(TEST_APT_PACKAGES))

$(PYTHON): | system-packages
	python3 -m venv $(VENV)

# The Apache Kafka broker's jars, from Maven Central into ~/.cache/jobsvc (outside the
# state dir, keyed by the POM: a second `make run` needs no network).
$(KAFKA_STAMP): $(KAFKA_POM) | $(RUNTIME_STAMP)
	$(PYTHON) -m tools.devstack fetch-kafka
	touch $@

$(RUNTIME_STAMP): requirements/runtime.txt | $(PYTHON)
	$(PIP_INSTALL) -r requirements/runtime.txt
	touch $@

$(DEV_STAMP): requirements/dev.txt | $(RUNTIME_STAMP)
	$(PIP_INSTALL) -r requirements/dev.txt
	touch $@

run: bootstrap
	$(PYTHON) -m tools.devstack run $(ARGS)

test: bootstrap-dev test-system-packages
	$(MAKE) --no-print-directory lint
	$(PYTHON) -m tools.devstack test $(ARGS)

# The fast loop: tests marked `unit` (tests/unit) need no servers, only dev settings.
unit: bootstrap-dev
	JOBSVC_DEBUG=true $(PYTHON) -m pytest -m unit -q $(ARGS)

# The tree says what the product does now: a line that names a development session fails
# (their history is in git; measurements go in commit messages). Lock files are left out.
lint: bootstrap-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@if git grep -InE -i 'sessions? [0-9]' -- ':!requirements/*.txt'; then \
	  echo "lint: the lines above narrate development sessions; say what the product does now"; \
	  exit 1; \
	fi

# Recompiles both lock files, keeping every pin that still satisfies its input; upgrade
# with ARGS='--upgrade-package NAME' (or ARGS=--upgrade for everything).
LOCK := CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --generate-hashes \
	--allow-unsafe --strip-extras --no-emit-find-links $(ARGS)
lock: bootstrap-dev
	$(LOCK) --output-file requirements/runtime.txt pyproject.toml
	$(LOCK) --output-file requirements/dev.txt pyproject.toml requirements/dev.in

# The deployment files alone, without a stack or a Docker engine: tests/deploy validates
# docker-compose.yml against the compose schema and the app's settings, runs promtool on
# the alert rules, and checks the dashboards against the metrics contract. (`make test`
# runs the same tests along with everything else.)
check-deploy: bootstrap-dev
	JOBSVC_DEBUG=true $(PYTHON) -m pytest tests/deploy -q $(ARGS)

bench: bootstrap-dev
	$(call apt_install,$(BENCH_APT_PACKAGES))
	$(PYTHON) -m tools.devstack bench $(ARGS)

# The whole system under a nemesis (tools/chaos): its own stack of real servers, jobs
# through the API, every fault once, then mixed at random (one or two at once) with a
# printed seed; exits 1 if a job was lost, run twice for one attempt, or started early,
# if a fault's jobs started more than 10 s late, or a check failed. Partitions and the
# full disk need root. Table in chaos-results/; see docs/chaos.md.
chaos: bootstrap-dev test-system-packages
	$(PYTHON) -m tools.chaos $(ARGS)

clean:
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf
	rm -rf .pytest_cache .ruff_cache .hypothesis

# Stops anything an earlier `make run` left behind, then deletes .state/ (refuses while a
# `make run` is using it).
clean-state:
	@if [[ -x $(PYTHON) ]]; then \
	  $(PYTHON) -m tools.devstack clean-state; \
	else \
	  rm -rf .state; \
	fi
