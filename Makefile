# The two commands of the README: `make demo` and `make test`.
# Both create .venv from pyproject.toml on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: demo test test-postgres bench venv

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

demo: venv
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py demo_user
	$(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-postgres: venv
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres} $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks $(BENCH_ARGS)
