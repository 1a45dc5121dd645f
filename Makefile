# jobsvc: local development entry points. GNU make, bash.
#
#   make bootstrap    system packages (apt), .venv, Python requirements; idempotent
#   make run          the local stack with the API and workers (data kept in .state/)
#   make test         lint, then pytest against a throwaway stack of real servers
#   make unit         the unit tier alone: pure logic, no servers, in seconds
#   make lint         ruff check + ruff format --check
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
# pip runs again only when a requirements file changes after this stamp.
REQUIREMENTS_STAMP := $(VENV)/.requirements-installed
REQUIREMENTS := $(wildcard requirements/*.txt)
KAFKA_POM := tools/devstack/kafka.pom.xml
KAFKA_STAMP := $(VENV)/.kafka-fetched
# Debian packages the stack needs: PostgreSQL server binaries, ZooKeeper (and the Java
# runtime it and Kafka run on), Maven (fetches the Kafka broker), the venv module Debian ships separately from python3, and
# Prometheus (`make run` starts one; the tests run its `promtool` on the alert rules), and
# Chromium with its WebDriver (the admin's cluster page is tested in a headless browser).
APT_PACKAGES := postgresql zookeeper default-jre-headless maven python3-venv prometheus \
	chromium chromium-driver
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
ARGS ?=

.PHONY: help bootstrap system-packages run test unit lint check-deploy bench chaos clean clean-state

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

bootstrap: system-packages $(REQUIREMENTS_STAMP) $(KAFKA_STAMP)

system-packages:
	@missing=(); \
	for package in $(APT_PACKAGES); do \
	  status=$$(dpkg -s "$$package" 2>/dev/null || true); \
	  [[ $$status == *"Status: install ok installed"* ]] || missing+=("$$package"); \
	done; \
	if (( $${#missing[@]} )); then \
	  echo "Installing Debian packages: $${missing[*]}"; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends "$${missing[@]}"; \
	fi

$(PYTHON): | system-packages
	python3 -m venv $(VENV)

# The Apache Kafka broker's jars, from Maven Central into ~/.cache/jobsvc (outside the
# state dir, keyed by the POM: a second `make run` needs no network).
$(KAFKA_STAMP): $(KAFKA_POM) | $(REQUIREMENTS_STAMP)
	$(PYTHON) -m tools.devstack fetch-kafka
	touch $@

$(REQUIREMENTS_STAMP): $(REQUIREMENTS) | $(PYTHON)
	$(PYTHON) -m pip install --disable-pip-version-check -r requirements/dev.txt
	touch $@

run: bootstrap
	$(PYTHON) -m tools.devstack run $(ARGS)

test: bootstrap
	$(MAKE) --no-print-directory lint
	$(PYTHON) -m tools.devstack test $(ARGS)

# The fast loop: tests marked `unit` (tests/unit) need no servers, only dev settings.
unit: bootstrap
	JOBSVC_DEBUG=true $(PYTHON) -m pytest -m unit -q $(ARGS)

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Debian packages only the benchmarks need: wrk generates the API load; redis-server is
# the broker of Celery, one of the peers the `peers` scenario measures beside jobsvc.
BENCH_APT_PACKAGES := wrk redis-server

# The deployment files alone, without a stack or a Docker engine: tests/deploy validates
# docker-compose.yml against the compose schema and the app's settings, runs promtool on
# the alert rules, and checks the dashboards against the metrics contract. (`make test`
# runs the same tests along with everything else.)
check-deploy: bootstrap
	JOBSVC_DEBUG=true $(PYTHON) -m pytest tests/deploy -q $(ARGS)

bench: bootstrap
	@for package in $(BENCH_APT_PACKAGES); do \
	  dpkg -s "$$package" >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$$package"; }; \
	done
	$(PYTHON) -m tools.devstack bench $(ARGS)

# The whole system under a nemesis (tools/chaos): its own stack of real servers, jobs
# through the API, one fault at a time, then mixed at random with a printed seed; exits 1
# if a job was lost, run twice for one attempt, or started early. Table in chaos-results/.
chaos: bootstrap
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
