# The Makefile is the interface: README, CI and developers run these targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST     ?=
SCENARIO ?= config/default.yaml
WORKERS  ?= 2
ARGS     ?=

.PHONY: install system-tools test test-unit demo run distributed sim bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: install the venv module (Debian: apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

# Binaries the integration tests drive (Debian packages; installed when missing and we are root).
system-tools:
	@bash scripts/ensure-prometheus.sh
	@bash scripts/ensure-chromium.sh

test: install system-tools
	$(PY) -m pytest -q -ra

test-unit: install
	$(PY) -m pytest -q -m "not integration"

# The main job on the built-in simulator: a large simulated server, a full 1000/1000 sweep in ~2-3 min.
demo: install
	$(PY) scripts/demo.py $(ARGS)

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

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache *.egg-info
