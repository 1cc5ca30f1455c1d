# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv with pip, install torch 2.13.0 (CPU) and edgetrain with its extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS := data,peft,ray,test
STAMP := $(VENV)/.edgetrain-installed

.PHONY: demo test test-flower lint format clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/edgetrain demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(PY) -m pytest

# Flower pins older protobuf/rich/typer/ray than ours, so it gets its own venv.
FLOWER_VENV := .venv-flower
test-flower:
	$(PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOWER_VENV)/bin/python -m pip install --quiet "torch==2.13.0"
	$(FLOWER_VENV)/bin/python -m pip install --quiet -e ".[flower,data,test]"
	FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 OMP_NUM_THREADS=1 \
		$(FLOWER_VENV)/bin/python -m pytest tests/integrations -p no:cacheprovider --durations=5

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

clean:
	rm -rf $(VENV) $(FLOWER_VENV) runs build src/*.egg-info
