# mathrl: one venv, everything through it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test report bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned, so nothing resolves a newer (CUDA-laden) build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf results .snakemake
