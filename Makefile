PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-fast lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,hf]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shoal demo

# The suite (unit and multi-process tests; not the `slow` end-to-end ones: the bench scripts'
# smoke runs and the long fault scenarios, which `make test-all` adds, about 9 minutes more) and
# the formatter's verdict, in under 10 minutes on 2 cores.
# Bytecode is compiled once up front: with PYTHONDONTWRITEBYTECODE set (as on these machines)
# each of the suite's hundreds of worker processes would compile shoal's modules again.
test: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/python -m compileall -q src tests bench examples > /dev/null
	$(BIN)/python -m pytest -m "not slow"

# Everything, the `slow` tests included (about 17 minutes on 2 cores).
test-all: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/python -m compileall -q src tests bench examples > /dev/null
	$(BIN)/python -m pytest

# The quick selection for the edit-test loop (under a minute on 2 cores).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not dist and not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
