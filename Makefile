PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# --no-compile: Python compiles only the modules it imports, on first import (torch's whole
# tree compiled up front costs most of its install time)
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --no-compile torch==2.13.0
	$(BIN)/pip install -q --no-compile -e '.[dev,hf]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shoal demo

# The whole suite (multi-process and slow tests included) and the formatter's verdict.
test: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/python -m pytest

# The quick selection for the edit-test loop (under a minute on 2 cores).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not dist and not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
