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
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.llama_buffers import CRASH_SIGNALS, NO_EXTRA_BUFTS_PRELUDE, signal_name
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


def run_llama_child(code: str, *args: str, timeout: float = 300):
    """Run `code` (Python that drives llama.cpp) in a child process, so that an abort does not kill
    pytest; a child that crashes with a signal of CRASH_SIGNALS runs once more with llama.cpp's extra
    weight buffers (AMX, CPU_REPACK) off, the rule of calibrate.llama_buffers: those kernels crash on
    some machines whatever the file. Returns the CompletedProcess."""
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if signal_name(res.returncode) in CRASH_SIGNALS:
        res = subprocess.run([sys.executable, "-c", NO_EXTRA_BUFTS_PRELUDE + code, *args], capture_output=True,
                             text=True, timeout=timeout)
    return res
