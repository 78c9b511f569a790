# The two commands of the README: `make demo` and `make test`.
# Both create $(VENV) (default .venv) from pyproject.toml on first use.
#
#   make demo PORT=8001                       the demo on another port (default 8000)
#   make test PYTEST_ARGS="tests/test_checks.py -x"
#   make test-fast                            unit + integration tiers: no server processes,
#                                             Chromium, Node, fresh project or fault injection
#   make test PYTHON=python3.12 VENV=.venv/matrix/py3.12 DJANGO='Django>=6,<7'
#                                             the suite on another interpreter and Django
#                                             (.ci/run's matrix); one VENV per combination

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000
# A pip requirement that pins Django in $(VENV), e.g. 'Django>=5.2,<5.3'; empty: what pyproject resolves.
DJANGO ?=

.PHONY: demo test test-fast test-postgres bench venv

# The suite starts hundreds of Python processes (servers, manage.py, producers, workers). Where
# PYTHONDONTWRITEBYTECODE is set, as on the CI machine, none of them writes .pyc files, so each one
# compiled the checkout's modules again (about 15 % of an e2e test's CPU): compile them once first
# (under a second; a few hundredths when nothing changed). .gitignore keeps __pycache__ out of git.
COMPILE = $(BIN)/python -m compileall -q agent_persistence example_project tests

# Binds 127.0.0.1:PORT as the server would (SO_REUSEADDR, so a recent demo's TIME_WAIT is fine).
define PORT_IS_FREE
import socket, sys
probe = socket.socket()
probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    probe.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as exc:
    sys.exit(f"{exc.strerror}")
endef
export PORT_IS_FREE

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]' $(if $(DJANGO),'$(DJANGO)')
	@$(BIN)/python -c 'import sys, django; print(f"$(VENV): Python {sys.version.split()[0]}, Django {django.__version__}")'
	touch $@

demo: venv
	@# Daphne's runserver logs "Listen failure" and keeps running on a taken port: refuse first.
	@$(BIN)/python -c "$$PORT_IS_FREE" $(PORT) || \
		{ echo "make demo: port $(PORT) on 127.0.0.1 is taken; stop what listens there, or run: make demo PORT=8001" >&2; exit 1; }
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py demo_user
	$(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

test: venv
	@$(COMPILE)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: venv
	@$(COMPILE)
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

test-postgres: venv
	@$(COMPILE)
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres} $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks $(BENCH_ARGS)
