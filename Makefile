# Quick start: `make demo` (train and evaluate the default model) and `make test`.
# Both set everything up on a fresh Debian machine: system packages, .venv, data.
# Where torch sees a GPU, `make demo` trains the papers'-size GPU recipe instead
# (configs/rnnsearch-gpu.yaml, 10 minutes) unless DEMO_CONFIG is given.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CTX := $(BIN)/ctxnmt
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
DEMO_CONFIG ?= configs/demo.yaml
DEMO_DIR ?= runs/demo
# The demo trains a fixed number of updates (configs/demo.yaml).  DEMO_MINUTES caps the
# training's wall-clock time instead (the BLEU then depends on the machine); DEMO_SET passes
# key=value settings, e.g. DEMO_SET="training.max_updates=400 training.cooldown_updates=200".
DEMO_MINUTES ?=
DEMO_SET ?=
DEMO_DEVICE ?= cpu
DATA := data/bible

.PHONY: demo demo-run test install sysdeps browser data bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m ctxnmt.models.kernels
	@touch $@

# The SWORD Bible modules and the diatheke reader, from Debian; Chromium and its driver
# for the judge page's browser test; apertium-eng-spa for the POS tags of `analyze gates`.
sysdeps:
	@if ! command -v diatheke >/dev/null || ! diatheke -b system -k modulelist 2>/dev/null | grep -q spaRV1909eb \
	    || ! diatheke -b system -k modulelist 2>/dev/null | grep -q engKJV2006eb; then \
	  echo "installing diatheke and the SWORD Bible modules with apt"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    diatheke sword-text-sparv sword-text-kjv >/dev/null; \
	fi
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null \
	    || [ ! -f /usr/share/apertium/apertium-eng-spa/spa-eng.prob ]; then \
	  echo "installing chromium, chromium-driver and apertium-eng-spa with apt"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    chromium chromium-driver apertium-eng-spa >/dev/null; \
	fi

# Headless Chromium and its driver for the web page's browser test (tests/serve/test_browser.py).
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing chromium and chromium-driver with apt"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    chromium chromium-driver >/dev/null; \
	fi

data: install sysdeps
	$(CTX) data bible --out $(DATA)

$(DEMO_DIR)/done.json: | install sysdeps data
	$(CTX) train $(DEMO_CONFIG) --set model_dir=$(DEMO_DIR) $(foreach s,$(DEMO_SET),--set $(s)) $(if $(DEMO_MINUTES),--max-minutes $(DEMO_MINUTES)) \
	  $$( [ -f $(DEMO_DIR)/checkpoints/last.pt ] && echo --resume )

$(DEMO_DIR)/test.hyp.en: $(DEMO_DIR)/done.json
	$(CTX) translate $(DEMO_DIR) -i $(DATA)/test.es -o $@ --beam 5 --device $(DEMO_DEVICE)

# Whether torch sees a GPU is known only once .venv exists, so the choice is made here and
# the demo itself runs in a second make with the chosen settings.
demo: | install
	@if [ "$(origin DEMO_CONFIG)" = file ] \
	    && $(BIN)/python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then \
	  echo "torch sees a GPU: the demo trains configs/rnnsearch-gpu.yaml"; \
	  $(MAKE) --no-print-directory demo-run DEMO_CONFIG=configs/rnnsearch-gpu.yaml DEMO_DIR=runs/rnnsearch-gpu \
	    DEMO_MINUTES=10 DEMO_DEVICE=cuda; \
	else \
	  $(MAKE) --no-print-directory demo-run; \
	fi

demo-run: $(DEMO_DIR)/test.hyp.en
	$(CTX) score --hyp $< --ref $(DATA)/test.en --lang en --metrics bleu,chrf
	$(BIN)/python -m ctxnmt.examples --src $(DATA)/test.es --ref $(DATA)/test.en --hyp $< -n 8

test: install sysdeps browser
	$(BIN)/python -m pytest -q -x --durations=15

bench: install sysdeps
	$(BIN)/python benchmarks/speed.py configs/bench.yaml

clean:
	rm -rf runs $(DATA)
