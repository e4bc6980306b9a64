# Everything a fresh Debian or Ubuntu machine needs, installed by `make install`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin/jobqueue-demo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := pkg-config libmariadb-dev gcc python3-dev python3-venv
SERVER := $(shell command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd /usr/sbin/mysqld 2>/dev/null | head -1)
# PostgreSQL's server binaries are off PATH on Debian: where pg_config says, or any installed major.
PG_SERVER := $(shell d=$$(pg_config --bindir 2>/dev/null); [ -x "$$d/initdb" ] && echo $$d/initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | head -1)

# As root the throwaway servers run as this system user, which owns nothing else (README, Safety).
SERVER_USER := jobqueue-demo

.PHONY: install bytecode demo test test-fast lint bench build-packages system-packages server-user test-packages clean

install: $(BIN) bytecode system-packages server-user

# Every time, not only with a new venv: after an edit, stale bytecode would be compiled from
# source on each run where PYTHONDONTWRITEBYTECODE is set (start-up measured wrong by milliseconds).
bytecode: $(BIN)
	$(PY) -m compileall -q jobqueue_demo >/dev/null

# apt only when something is missing, so a warm `make install` touches nothing.
APT_INSTALL_MISSING = if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES) $$missing >/dev/null; \
	fi

# Only when missing, so a warm `make install` touches nothing.
server-user:
	@id -u $(SERVER_USER) >/dev/null 2>&1 || $(SUDO) $$(command -v useradd || echo /usr/sbin/useradd) --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin $(SERVER_USER)

# What the venv needs (mysqlclient is built against libmariadb), and no server: all
# `make test-fast` installs.
build-packages:
	@missing=""; \
	pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null || missing="$$missing libmariadb-dev pkg-config"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	python3 -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	$(APT_INSTALL_MISSING)

# The servers: MariaDB with Galera and mariadb-test, and PostgreSQL; and Debian's chromium, the
# browser `serve`'s pages are tested in (Playwright drives it: it never downloads one of its own).
system-packages: build-packages
	@missing=""; \
	[ -n "$(SERVER)" ] || missing="$$missing mariadb-server"; \
	ls /usr/lib/galera*/libgalera_smm.so >/dev/null 2>&1 || ls /usr/lib64/galera*/libgalera_smm.so >/dev/null 2>&1 || missing="$$missing galera-4"; \
	command -v mariadb-test >/dev/null || command -v mysqltest >/dev/null || missing="$$missing mariadb-test"; \
	[ -n "$(PG_SERVER)" ] || missing="$$missing postgresql"; \
	[ -n "$$(ls /usr/lib/*/libpq.so.5 /usr/lib64/libpq.so.5 2>/dev/null)" ] || missing="$$missing libpq5"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	$(APT_INSTALL_MISSING)

$(BIN): pyproject.toml | build-packages
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip >/dev/null
	$(PY) -m pip install -q -e '.[test]'
	touch $(BIN)

demo: install
	$(BIN) run skip-locked

# tmux draws step mode and the columns view in the tests (tests/test_tmux.py).
test-packages:
	@command -v tmux >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq tmux >/dev/null; }

# Two workers (pytest-xdist), one a core: most of a test's time is a server's or a child's, not
# the test's own CPU (6 min against 11 in one process here). Three were 5 min, but the timing of
# the lessons' waits and deadlocks then slipped now and then (4 runs in 9 had a failure). worksteal: the longest tests
# (README examples, replays, 20-30 s each) do not end up queued behind one another. Then the
# tests that must be the ones sweeping a shared server's leftovers, alone (marker `sweeps`).
test: install test-packages lint
	$(VENV)/bin/pytest -q -rs -n 2 --dist worksteal -m "not sweeps"  # -rs: why a test skipped, e.g. a Galera cluster that cannot start here
	$(VENV)/bin/pytest -q -rs -m sweeps

# The tests that need no server and start no process (tests/fast_subset.py): seconds, on a
# machine without any database.
test-fast: $(BIN) lint
	$(VENV)/bin/pytest -q -m fast

lint: $(BIN)
	$(VENV)/bin/ruff check jobqueue_demo tests bench

bench: install
	$(PY) bench/bench_seed_vs_mysqltest.py

clean:
	rm -rf $(VENV) build *.egg-info
