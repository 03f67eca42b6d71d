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

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from calibrate.tiny_gguf import write_tiny_gguf

HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
requires_llama_cpp = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed")

TINY_N_CTX = 2048


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight llama GGUF (2 layers, hidden 64, vocab 512, context 2048, f16)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-model") / "tiny.gguf", n_ctx=TINY_N_CTX, seed=0)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(
    model_path: str | Path,
    *,
    n_ctx: int = 1024,
    extra_args: tuple[str, ...] = (),
    startup_timeout_s: float = 60.0,
    max_lifetime_s: float = 300.0,
) -> Iterator[str]:
    """Run `python -m llama_cpp.server` on a free loopback port; yield its base URL.

    Bounded in time twice over: startup waits at most `startup_timeout_s` for `GET /v1/models`
    to answer, and the server runs under coreutils `timeout` so it ends after `max_lifetime_s`
    even if the test process is killed. On exit the server is terminated (then killed).
    """
    import httpx

    port = free_loopback_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), *extra_args,
    ]
    if shutil.which("timeout"):
        cmd = ["timeout", "--kill-after=5", f"{int(max_lifetime_s)}s", *cmd]
    log = Path(str(model_path)).with_suffix(f".server-{port}.log")
    with open(log, "wb") as log_f:
        proc = subprocess.Popen(cmd, stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer within {startup_timeout_s} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
