PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test demo bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/python -m compileall -q src  # bytecode once: the CLI starts without compiling
	touch $@

test: install
	$(BIN)/ruff check src tests bench demo
	$(BIN)/mypy
	$(BIN)/pytest -q

demo: install
	rm -rf demo/warehouse
	$(BIN)/python demo/flights.py --warehouse demo/warehouse

bench: install
	$(BIN)/python bench/run_all.py

lint: install
	$(BIN)/ruff format src tests bench demo
	$(BIN)/ruff check --fix src tests bench demo
	$(BIN)/mypy

clean:
	rm -rf $(VENV) demo/warehouse warehouse bench/results/*.tmp
