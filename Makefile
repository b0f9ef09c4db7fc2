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

SPARK_STATE := .spark-cluster

# The Spark tests run on a standalone cluster (one master, one worker, started from
# pyspark's own spark-class): executors live in other JVMs than the driver. Each
# application takes one of the worker's two cores, so a test's second one can run.
test: install
	$(BIN)/ruff check src tests bench demo scripts
	$(BIN)/mypy
	$(BIN)/python scripts/spark_cluster.py start $(SPARK_STATE)
	SPARK_MASTER=$$(cat $(SPARK_STATE)/master) \
	  PYSPARK_SUBMIT_ARGS="--conf spark.cores.max=1 pyspark-shell" $(BIN)/pytest -q -n 2; \
	  rc=$$?; $(BIN)/python scripts/spark_cluster.py stop $(SPARK_STATE); exit $$rc

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
	rm -rf $(VENV) demo/warehouse warehouse bench/results/*.tmp .spark-cluster
