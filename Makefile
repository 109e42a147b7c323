# mathrl: one venv, everything through it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system-deps test report tiny bench clean

setup: system-deps $(STAMP)

# Debian packages the tests use (chromium, slurm-wlm, munge); only as root, only if missing.
system-deps:
	@bash scripts/install-system-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned, so nothing resolves a newer (CUDA-laden) build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: setup
	$(BIN)/ruff format --check . && $(BIN)/ruff check .
	$(BIN)/pytest -q

report: setup
	@start=$$(date +%s); $(BIN)/snakemake --profile profiles/default report && \
	  echo "snakemake took $$(( $$(date +%s) - start )) s"
	@$(BIN)/python -m bench.split results || true
	@echo "open results/report.html"

# A small whole pipeline (config/examples/tiny.yaml), in results/tiny; its time on 2 cores: docs/guide/first-run.md.
tiny: setup
	@start=$$(date +%s); $(BIN)/snakemake --profile profiles/default report --configfile config/examples/tiny.yaml && \
	  echo "snakemake took $$(( $$(date +%s) - start )) s"
	@echo "open results/tiny/report.html"

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf results .snakemake
