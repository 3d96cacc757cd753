# The two set-up commands: `make run` (local stack) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-sqlite test-postgres migrate migration bench clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

## Start HTTP API, SMTP gateway and queue workers on SQLite (Ctrl-C stops all of it).
run: install
	$(PY) -m chalicelib.local

## The test suite: PostgreSQL when TEST_DATABASE_URL is set, a fresh SQLite file otherwise.
test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-sqlite: install
	env -u TEST_DATABASE_URL $(PY) -m pytest $(PYTEST_ARGS)

migrate: install
	$(PY) -m chalicelib.db.migrate

## A new migration from the models' changes: make migration m="what changed"
migration: install
	rm -f /tmp/email-service-migration.db
	$(PY) -c "import sys; from alembic import command, script; from chalicelib.db.migrate import alembic_config; \
	cfg = alembic_config('sqlite:////tmp/email-service-migration.db'); command.upgrade(cfg, 'head'); \
	head = script.ScriptDirectory.from_config(cfg).get_current_head(); \
	command.revision(cfg, message=sys.argv[1], autogenerate=True, rev_id='%04d' % (int(head) + 1))" "$(m)"

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .pytest_cache
