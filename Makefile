# rankscope: `make demo` and `make test` do all their own set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A pinned, tested torch for the dev venv (pyproject says torch>=2.3). Override: make test TORCH_SPEC='torch==2.5.1'
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test install clean bench sysdeps npu-wheel hta-venv

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

# The torch-npu wheel is a dev dependency too: tests/torch_npu_oracle.py runs its profiler analysis (pure
# Python, no NPU needed) as the oracle of Ascend's step_trace_time.csv. Cached once here, read by the tests
# (which never download it, and fail with this command when it is absent). Version: the oracle's VERSION.
TEST_CACHE ?= $(HOME)/.cache/rankscope-tests
export RANKSCOPE_TEST_CACHE := $(abspath $(TEST_CACHE))
TORCH_NPU_VERSION := $(shell sed -n 's/^VERSION = "\(.*\)"$$/\1/p' tests/torch_npu_oracle.py)

npu-wheel: $(STAMP)
	@ls $(TEST_CACHE)/wheels/torch_npu-$(TORCH_NPU_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "caching the torch-npu $(TORCH_NPU_VERSION) wheel in $(TEST_CACHE)/wheels (the Ascend oracle's source)"; \
	  $(PY) -m pip download --no-deps -q -d $(TEST_CACHE)/wheels --python-version 3.11 --only-binary=:all: \
	    --platform manylinux_2_28_x86_64 torch-npu==$(TORCH_NPU_VERSION); }

# HTA 0.5.0 (holistictraceanalysis), the oracle of tests/golden/test_critical_path_hta.py, needs pandas < 3,
# which the project's venv does not have: its own venv, the one bench/ingest.py uses too.
HTA_VENV := .bench/hta-venv

hta-venv: $(HTA_VENV)/.installed

$(HTA_VENV)/.installed:
	@test -x $(HTA_VENV)/bin/python || $(PYTHON) -m venv $(HTA_VENV)
	$(HTA_VENV)/bin/python -m pip install -q holistictraceanalysis==0.5.0 "pandas<3"
	@touch $@

# Two pytest workers by default (pytest-xdist, one test file per worker): 14-19 instead of 23-26 minutes on 2
# cores; each worker and each test spools under its own folder (tests/conftest.py). TEST_WORKERS=0 runs one
# process (bench/RESULTS.md, "Two workers by default: fresh runs").
TEST_WORKERS ?= 2
test: $(STAMP) sysdeps npu-wheel hta-venv
	$(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) rankscope-runs
