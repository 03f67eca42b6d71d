# Quick start: `make run` (set up + simulate a bundled trace) and `make test` (set up + run the tests).
# Both create the virtual environment on first use; later calls reuse it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: run test venv bench clean

venv: $(VENV)/.installed

# the install compiles sim/_compiled.py's modules (setup.py): an edited one is compiled again here
# (until then it runs from its source: same results, slower)
COMPILED_SOURCES = $(shell $(PYTHON) -c "import runpy; print(' '.join(m.replace('.', '/') + '.py' for m in runpy.run_path('sim/_compiled.py')['COMPILED']))")

$(VENV)/.installed: pyproject.toml setup.py sim/_compiled.py $(COMPILED_SOURCES)
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
	find sim -name '*.so' -delete -o -name '*.c' -delete
