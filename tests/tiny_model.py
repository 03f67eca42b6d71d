"""Shared test helpers for anything that drives real llama.cpp: a tiny GGUF and a bounded server.

Import into a test module (pytest's default import mode puts tests/ on sys.path):

    from tiny_model import tiny_gguf, requires_llama_cpp, llama_server

    @requires_llama_cpp
    def test_something(tiny_gguf):            # session-scoped fixture -> Path of a ~0.3 MB GGUF
        with llama_server(tiny_gguf) as url:  # python -m llama_cpp.server on a free loopback port
            ...                               # url = "http://127.0.0.1:PORT"

The GGUF is written by `calibrate.tiny_gguf.write_tiny_gguf` (random weights, llama architecture,
SentencePiece-style vocabulary of 512 tokens): it loads in milliseconds and decodes at thousands
of tokens/s, so tests that run real llama.cpp stay in the seconds range.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from calibrate.replay.llama_cpp_server import free_loopback_port, llama_cpp_server  # noqa: F401 - re-exported
from calibrate.tiny_gguf import write_tiny_gguf

HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
requires_llama_cpp = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed")

TINY_N_CTX = 2048


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight llama GGUF (2 layers, hidden 64, vocab 512, context 2048, f16)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-model") / "tiny.gguf", n_ctx=TINY_N_CTX, seed=0)


# The bounded server lives in the package so benchmarks/fidelity.py drives the same one.
llama_server = llama_cpp_server


# Signals of a llama.cpp crash that `run_llama_child` retries without the extra weight buffers, the
# rule calibrate.probes.run_plan applies to the calibrator's own child process.
from calibrate.probes import CRASH_SIGNALS  # noqa: E402

# Prepended to a child's code when the extra weight buffers must stay off: llama-cpp-python's
# high-level `Llama` takes its model parameters from llama_model_default_params() and has no
# argument for `use_extra_bufts`.
_NO_EXTRA_BUFTS = (
    "import llama_cpp.llama_cpp as _L\n"
    "_defaults = _L.llama_model_default_params\n"
    "def _params():\n"
    "    p = _defaults()\n"
    "    p.use_extra_bufts = False\n"
    "    return p\n"
    "_L.llama_model_default_params = _params\n"
)


def run_llama_child(code: str, *args: str, timeout: float = 300):
    """Run `code` (Python that drives llama.cpp) in a child process, so that an abort does not kill
    pytest; a child that crashes with a signal of CRASH_SIGNALS runs once more with llama.cpp's extra
    weight buffers (AMX, CPU_REPACK) off. Those kernels segfault on some machines, e.g. llama-cpp-python
    0.3.36 on a 2-vCPU Sapphire Rapids VM that advertises AMX, on every Q8_0 / Q4_K file: a fault of
    that build on that CPU, not of the file under test. Returns the CompletedProcess."""
    import signal
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if res.returncode < 0 and signal.Signals(-res.returncode).name in CRASH_SIGNALS:
        res = subprocess.run([sys.executable, "-c", _NO_EXTRA_BUFTS + code, *args], capture_output=True,
                             text=True, timeout=timeout)
    return res
