# The two commands of the README: `make run` (main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
CONFIG ?= config/config.yaml

.PHONY: install run report reference-report test lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c requirements/lock.txt -e '.[test,slurm]'
	touch $@

# check-config first: a config file Snakemake's own loader cannot read (not UTF-8) would stop it
# with a traceback before any rnnopt code runs.
run: install
	$(BIN)/python -m rnnopt check-config config/config.yaml $(CONFIG)
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG)

report: install
	$(BIN)/python -m rnnopt check-config config/config.yaml $(CONFIG)
	$(BIN)/snakemake report_only --cores $(CORES) --configfile $(CONFIG)

# The committed reference report again from its records (results/reference/runs/<run>/, one
# folder per host: the CPU and the GPU run side by side), with the between-run spread that
# results/reference/rerun-spread.csv holds for them; measures nothing.
reference-report: install
	$(BIN)/python -m rnnopt report --aggregate results/reference/runs \
		--csv results/reference/metrics.csv.gz --out results/reference \
		--rerun-spread results/reference/rerun-spread.csv

test: install
	$(BIN)/ruff check src tests
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) .snakemake
