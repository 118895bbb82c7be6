# Two commands are all a newcomer needs: `make book` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
BUILD := _build
PORT ?= 8000

# No model, dataset or script is ever fetched from the network at build or test time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1

.PHONY: help book test bench lint serve clean chromium

help:
	@echo "make book    build the whole book strictly into $(BUILD)/html"
	@echo "make test    run the whole test suite (package, book build, Chromium)"
	@echo "make bench   time attnbook against PyTorch, blockwise attention, and the book build"
	@echo "make serve   serve the built site on http://localhost:$(PORT)"
	@echo "make clean   remove the build output (keeps .venv)"

$(INSTALLED): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 11), \
		"the pinned requirements are for Python 3.11, this is " + sys.version.split()[0]'
	$(BIN)/pip install --disable-pip-version-check -r requirements.txt
	@touch $@

book: $(INSTALLED)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo
	@echo "The book is built: open $(abspath $(BUILD))/html/index.html"
	@echo "or run 'make serve' and visit http://localhost:$(PORT)"

test: $(INSTALLED) chromium
	$(BIN)/ruff check code tests exercises benchmarks book/_ext
	$(BIN)/python -m pytest

chromium:
	@if [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Chromium is missing: installing Debian's chromium package"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "The browser tests need Chromium. Install it, e.g. 'sudo apt-get install chromium'" \
		     "on Debian/Ubuntu, then run 'make test' again (or set CHROMIUM=/path/to/chromium)."; \
		exit 1; \
	fi

bench: $(INSTALLED)
	$(BIN)/python benchmarks/bench_attention.py; \
	status=$$?; \
	$(BIN)/python benchmarks/bench_efficient.py || status=1; \
	$(BIN)/python benchmarks/bench_book.py || status=1; \
	exit $$status

lint: $(INSTALLED)
	$(BIN)/ruff check code tests exercises benchmarks book/_ext

serve:
	@test -f $(BUILD)/html/index.html || { echo "Nothing built yet: run 'make book' first"; exit 1; }
	@echo "Serving $(BUILD)/html on http://localhost:$(PORT) (Ctrl-C to stop)"
	$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory $(BUILD)/html

clean:
	rm -rf $(BUILD) .pytest_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
