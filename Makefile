# Quick start: `make run` (set up + simulate a bundled trace) and `make test` (set up + run the tests).
# Both create the virtual environment on first use; later calls reuse it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: run test venv bench clean

venv: $(VENV)/.installed

# pure Python: an editable install, so an edited source runs as it is (nothing is built)
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[all]'
	touch $@

run: venv
	$(BIN)/infersim run workloads/examples/chat.jsonl --hw dgx-spark --model llama-3.1-8b --engine vllm

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/simspeed.py

clean:
	rm -rf $(VENV) build *.egg-info
