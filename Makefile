# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv with pip, install torch 2.13.0 (CPU) and edgetrain with its extras,
# Flower's included (its pins -- ray 2.55.1, rich < 15, typer < 0.21, protobuf < 7 -- lie
# inside ours, so pip resolves one environment and `make test` runs tests/integrations).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS := data,peft,ray,flower,test
STAMP := $(VENV)/.edgetrain-installed

.PHONY: demo test lint format clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
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

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

clean:
	rm -rf $(VENV) runs build src/*.egg-info
