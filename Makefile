# The two set-up commands: `make run` (local stack) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run check test test-sqlite test-postgres migrate migration openapi bench clean \
	rehearse rehearse-deps

# Progress is shown step by step, then pip's own line per package (a fresh clone takes about
# a minute: silence there looked like a hang).
CONSOLE_VENDOR := console/assets/vendor/qrcode.mjs

$(STAMP): requirements.txt requirements-dev.txt
	@echo "==> [1/3] virtualenv $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] pip"
	@$(PY) -m pip install --quiet --upgrade "pip<26.3"
	@echo "==> [3/3] requirements-dev.txt (runtime + test libraries; one line per package)"
	@$(PY) -m pip install --progress-bar on -r requirements-dev.txt
	@touch $(STAMP)
	@echo "==> installed: make run starts the stack, make test runs the suite"

# The console's only third-party file (the QR code of 2FA enrolment), from the npm registry
# at the version package-lock.json pins; served as-is from console/assets/vendor/.
$(CONSOLE_VENDOR): console/package.json console/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: the console works, but 2FA enrolment shows no QR code (apt-get install npm)"; exit 0; }; \
	npm ci --no-audit --no-fund --prefix console >/dev/null
	@if [ -f console/node_modules/qrcode-generator/dist/qrcode.mjs ]; then \
	  mkdir -p console/assets/vendor && \
	  cp console/node_modules/qrcode-generator/dist/qrcode.mjs $(CONSOLE_VENDOR); fi

install: $(STAMP) $(CONSOLE_VENDOR)

## Start HTTP API, SMTP gateway and queue workers on SQLite (Ctrl-C stops all of it).
run: install
	$(PY) -m chalicelib.local

## The house rules as checks, in seconds (docs/testing.md; configured in pyproject.toml): ruff's
## short rule set, the layering contract of chalicelib/ (import-linter), mypy on chalicelib/,
## tests/house (no `_private` name used across modules; the lists of one fact kept as one).
check: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/mypy
	env -u TEST_DATABASE_URL $(PY) -m pytest -q -p no:cacheprovider tests/house

## The test suite: PostgreSQL when TEST_DATABASE_URL is set, a fresh SQLite file otherwise.
## `make check` runs first: a broken house rule fails before the long part.
test: install check
	$(PY) -m pytest $(PYTEST_ARGS)

## Chosen paths on PostgreSQL, as CI's first pass runs them:
## make test-postgres PATHS="tests/delivery tests/api" [TEST_DATABASE_URL=...] [PYTEST_ARGS=-x]
TEST_POSTGRES_URL := postgresql+pg8000://postgres@127.0.0.1:5432/test
test-postgres: install
	TEST_DATABASE_URL="$${TEST_DATABASE_URL:-$(TEST_POSTGRES_URL)}" $(PY) -m pytest $(PATHS) $(PYTEST_ARGS)

test-sqlite: install
	env -u TEST_DATABASE_URL $(PY) -m pytest $(PYTEST_ARGS)

## A deploy rehearsed end to end on a simulated AWS, offline (docs/deploying-rehearsal.md);
## REHEARSE_SERVE=1 leaves it serving. Needs docker.io, busybox-static, debootstrap: make rehearse-deps.
rehearse: install
	$(PY) infra/rehearsal/rehearse.py

## What `make rehearse` needs from Debian, installed as root (.ci/run calls this): the docker
## engine (the simulated Lambda runs each invocation in a container), busybox-static (moto
## copies code through a busybox container), debootstrap (the Lambda runtime image).
REHEARSE_DEPS := docker.io busybox-static debootstrap
rehearse-deps:
	@missing=$$(for p in $(REHEARSE_DEPS); do \
	  dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null | grep -qx installed || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "rehearse-deps: $(REHEARSE_DEPS) installed"; exit 0; fi; \
	missing=$$(echo $$missing); \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "rehearse-deps: $$missing missing; installing Debian packages needs root:" \
	    "sudo make rehearse-deps (or: sudo apt-get install $$missing)" >&2; exit 1; fi; \
	command -v apt-get >/dev/null || { echo "rehearse-deps: no apt-get: install $$missing" \
	  "(Debian's packages) by hand" >&2; exit 1; }; \
	echo "rehearse-deps: apt-get install $$missing"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null

migrate: install
	$(PY) -m chalicelib.db.migrate

## A new migration from the models' changes: make migration m="what changed"
## (needs only the installed venv: the stamp, not `install`, which would re-run npm)
migration: $(STAMP)
	rm -f /tmp/email-service-migration.db
	$(PY) -c "import sys; from alembic import command, script; from chalicelib.db.migrate import alembic_config; \
	cfg = alembic_config('sqlite:////tmp/email-service-migration.db'); command.upgrade(cfg, 'head'); \
	head = script.ScriptDirectory.from_config(cfg).get_current_head(); \
	command.revision(cfg, message=sys.argv[1], autogenerate=True, rev_id='%04d' % (int(head) + 1))" "$(m)"

## openapi.json from the code (tests/api/test_openapi.py fails on a stale copy)
openapi: $(STAMP)
	$(PY) -m chalicelib.api.openapi > openapi.json.tmp && mv openapi.json.tmp openapi.json

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
