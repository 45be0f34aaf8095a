# The two commands: `make demo` and `make test`. Each sets up everything it needs on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | md5sum | cut -c1-8)
TEAM_VENV ?= .venv-team
TEAM_STAMP := $(TEAM_VENV)/.installed-$(shell cat requirements-team.txt | md5sum | cut -c1-8)
DATA := data/build/.done

.PHONY: demo demo-headless demo-rl demo-rl-headless test test-fast lint format bench venv team-venv data browser sshd postgres clean

venv: $(STAMP)
$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q -r requirements.txt
	rm -f $(VENV)/.installed-*; touch $@

# Team mode's own venv: DuckDB 1.4.4 with the DuckLake and Postgres extensions (requirements-team.txt).
team-venv: $(TEAM_STAMP)
$(TEAM_STAMP): requirements-team.txt
	test -x $(TEAM_VENV)/bin/python || python3 -m venv $(TEAM_VENV)
	$(TEAM_VENV)/bin/pip install --disable-pip-version-check -q -r requirements-team.txt
	rm -f $(TEAM_VENV)/.installed-*; touch $@

data: $(DATA)
$(DATA): $(STAMP) data/*.py
	$(PY) -m data.build --out data/build

# Debian's chromium for the browser tests (never a Playwright browser download).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Debian's OpenSSH server and client for the remote-root tests (a real sshd on 127.0.0.1, keys made by the test).
sshd:
	@{ test -x /usr/sbin/sshd && command -v ssh-keygen >/dev/null && command -v scp >/dev/null; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openssh-server openssh-client >/dev/null; }

# Debian's PostgreSQL for the team-mode tests (a throwaway cluster on 127.0.0.1, made by the tests), and acl
# (setfacl: the shared lake folder's default ACL, tests/collector/test_team_access.py).
postgres:
	@test -x /usr/lib/postgresql/15/bin/initdb -a -x /usr/bin/setfacl || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql acl >/dev/null; }

demo: $(DATA)
	$(PY) scripts/demo.py

demo-headless: $(DATA)
	$(PY) scripts/demo.py --headless

# A verl GRPO run (main_ppo, rollout `hf`) on CPU, watched live: collector + dashboard.
demo-rl: $(DATA)
	$(PY) scripts/demo.py --rl

demo-rl-headless: $(DATA)
	$(PY) scripts/demo.py --rl --headless

test: $(DATA) browser sshd postgres team-venv
	$(PY) -m pytest

test-fast: $(DATA) sshd postgres team-venv
	$(PY) -m pytest -m "not slow and not browser"

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix . && $(VENV)/bin/ruff format .

bench: $(DATA)
	$(VENV)/bin/pip install --disable-pip-version-check -q -r requirements-bench.txt
	$(PY) bench/run_all.py

clean:
	rm -rf data/build runs demo-runs bench/out
