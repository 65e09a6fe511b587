# rankscope: `make demo` and `make test` do all their own set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A pinned, tested torch for the dev venv (pyproject says torch>=2.3). Override: make test TORCH_SPEC='torch==2.5.1'
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test install clean bench sysdeps

# System packages the tests need: Debian's chromium (the report and web UI are tested in a real
# headless browser) and openssh-server (`rankscope gather` is tested against a real sshd on
# 127.0.0.1). Installed with apt when running as root; otherwise make stops at once with the command.
SYSDEPS_CHECK := command -v chromium >/dev/null 2>&1 && test -x /usr/sbin/sshd

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rankscope demo $(ARGS)

sysdeps:
	@if ! ($(SYSDEPS_CHECK)); then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and openssh-server (apt-get; the browser and SSH tests need them)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium openssh-server >/dev/null; \
	  else \
	    echo "make test needs chromium and openssh-server; run: sudo apt-get install -y chromium openssh-server" >&2; \
	    exit 1; \
	  fi; \
	fi

test: $(STAMP) sysdeps
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) rankscope-runs
