# The two set-up commands: `make run` (local stack) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-sqlite test-postgres migrate migration-regen bench clean

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

## Rebuild the initial migration from the models (allowed until the first release).
migration-regen: install
	rm -f chalicelib/db/migrations/versions/0001_initial_schema.py /tmp/email-service-regen.db
	$(PY) -c "from alembic import command; from chalicelib.db.migrate import alembic_config; \
	command.revision(alembic_config('sqlite:////tmp/email-service-regen.db'), message='initial schema', autogenerate=True, rev_id='0001')"

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .pytest_cache
