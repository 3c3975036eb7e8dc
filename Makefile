# OpenEnv Hub. `make help` lists the targets.
SHELL := /bin/sh
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# pytest arguments, e.g. `make test ARGS="-k sync -x"`
ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help install run test check bench bench-index bench-validate bench-eval bench-push bench-web bench-api screenshots migrate clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml constraints.txt
	@py=$$(scripts/find-python) || exit 1; \
	  [ -x $(PY) ] || $$py -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	@touch $@

install: $(VENV)/.installed ## Build .venv with the pinned dependencies

migrate: install ## Apply database migrations
	$(PY) manage.py migrate

run: install ## Run the hub on embedded defaults: web + worker + beat + first sync (HOST, PORT)
	$(PY) manage.py runhub --host $(HOST) --port $(PORT)

test: install ## Run the test suite (PostgreSQL/Redis when DATABASE_URL/REDIS_URL are set)
	HUB_VAR_DIR=$(CURDIR)/var/test $(PY) -m pytest $(ARGS)

check: install ## Django system checks and migrations in sync with models
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

bench-index: install ## Benchmark indexing N synthetic Spaces from the Hub stand-in (N="1000 10000")
	$(PY) -m bench.bench_index $(N)

bench-validate: install ## Time a full validation beside `openenv validate <url>` on one server (RUNS=5)
	$(PY) -m bench.bench_validate $(RUNS)

bench-eval: install ## Episodes/s of the hub's baseline player beside openenv's own client, same episodes (ROUNDS=5)
	$(PY) -m bench.bench_eval $(ROUNDS)

bench-push: install ## From a push's webhook to the revision indexed and to its verdict, gunicorn + one idle worker (PUSHES=10)
	$(PY) -m bench.bench_push $(PUSHES)

bench-web: install ## Serve 1,000 and 10,000 environments with gunicorn on PostgreSQL and time the pages (N="1000 10000")
	$(PY) -m bench.bench_web $(N)

bench-api: install ## Time the API and badges on 1,000, 10,000 and 100,000 environments beside bare views (N=..., REDIS_URL for rate-limit counters)
	$(PY) -m bench.bench_api $(N)

screenshots: install ## PNGs of the main pages (desktop and phone, light and dark) under var/screenshots/
	HUB_VAR_DIR=$(CURDIR)/var/test $(PY) -m pytest tests/browser -k screenshots -p no:cacheprovider -q

bench: bench-index bench-validate bench-eval bench-push bench-web bench-api ## Run every benchmark

clean: ## Remove .venv and var/
	rm -rf $(VENV) var
