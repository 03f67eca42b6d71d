"""Start llama-cpp-python's OpenAI-compatible server on a loopback port, bounded in time.

Used by the tests (a tiny random-weight GGUF) and by benchmarks/fidelity.py (the server case of
the published fidelity figures), so both drive the same, bounded server.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from calibrate.llama_buffers import NO_EXTRA_BUFTS_PRELUDE, decode_crashed, extra_bufts_crash, off_warning


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_cpp_server(
    model_path: str | Path,
    *,
    n_ctx: int = 1024,
    extra_args: tuple[str, ...] = (),
    startup_timeout_s: float = 60.0,
    max_lifetime_s: float = 300.0,
    log_path: str | Path | None = None,
) -> Iterator[str]:
    """Run `python -m llama_cpp.server` on a free loopback port; yield its base URL.

    Bounded in time twice over: startup waits at most `startup_timeout_s` for `GET /v1/models`
    to answer, and the server runs under coreutils `timeout` so it ends after `max_lifetime_s`
    even if the calling process is killed. On exit the server is terminated (then killed).
    Raises RuntimeError (with the end of the server's log) if it exits or does not answer.

    Where a four-token decode of the model crashes with llama.cpp's extra weight buffers on
    (calibrate.llama_buffers), the server runs with them off, and says so on stderr and in its log.
    """
    import httpx

    port = free_loopback_port()
    server_args = ["--model", str(model_path), "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
                   *extra_args]
    crash = extra_bufts_crash(model_path)
    if crash:
        print(off_warning(decode_crashed(crash)), file=sys.stderr)
        launch = "import runpy\nrunpy.run_module('llama_cpp.server', run_name='__main__')\n"
        cmd = [sys.executable, "-c", NO_EXTRA_BUFTS_PRELUDE + launch, *server_args]
    else:
        cmd = [sys.executable, "-m", "llama_cpp.server", *server_args]
    if shutil.which("timeout"):
        cmd = ["timeout", "--kill-after=5", f"{int(max_lifetime_s)}s", *cmd]
    log = Path(log_path) if log_path else Path(str(model_path)).with_suffix(f".server-{port}.log")
    with open(log, "wb") as log_f:
        if crash:
            log_f.write(f"extra weight buffers off: {decode_crashed(crash)}\n".encode())
            log_f.flush()
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
