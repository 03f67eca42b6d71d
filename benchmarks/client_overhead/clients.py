"""The two benchmark clients of the client-overhead experiment, each as its source has it.

- `bench_httpx`: waynehacking8/trtllm-triton-serving bench/bench.py (read at 208b7ed): one process,
  `httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=C))` (so httpx's default of 20
  keep-alive connections stays), an `asyncio.Semaphore(C)` over `total` gathered tasks, each streaming
  `POST /v1/completions` with `aiter_lines`; t0 after the semaphore, TTFT at the first `data:` line.
  The request loop below is bench.py's `one_request` / `run`, line for line; the only addition is that the
  first `data:` line is kept (one assignment) so its `id` can be matched to the server's log afterwards.
- `vllm_aiohttp`: what `vllm bench serve --max-concurrency C --ignore-eos` does (vllm/benchmarks/serve.py
  `benchmark()` and lib/endpoint_request_func.py `async_request_openai_completions`): one
  `aiohttp.ClientSession` over a `TCPConnector(limit=C, limit_per_host=C, keepalive_timeout=60, ...)`, an
  initial single test request, then `total` tasks under a semaphore of C; `response.content.iter_any()`,
  vLLM's StreamedResponseHandler, `json.loads` per message, TTFT at the first message with `choices`.
  Left out: tqdm's progress bar (one update per finished request) and the metrics printout.

Two what-if variants of bench.py, not bench.py: `bench_httpx_keepalive` (max_keepalive_connections=C instead
of httpx's 20) and `bench_httpx_drain` (reads each body to its end instead of `break` at `data: [DONE]`).

Run as a process of its own (the experiment runs it with a throw-away venv's python):

    python clients.py --client bench_httpx --base http://127.0.0.1:PORT --concurrency 8 --total 64 --out r.json

It writes per request t0_s / first_s / end_s (time.perf_counter, CLOCK_MONOTONIC on Linux), the token count
and the first chunk's `id`, with the process's CPU seconds and the library versions.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import importlib
import json
import os
import sys
import time

PROMPT = "Explain tensor parallelism for LLM inference in three sentences."   # bench.py's 12-token prompt


def _rid(first_line: str | None) -> int | None:
    """The mock server's request number from a first chunk `data: {"id": "cmpl-N", ...}`."""
    if not first_line:
        return None
    data = json.loads(first_line.removeprefix("data:").strip())
    return int(data["id"].removeprefix("cmpl-"))


# --- bench.py (httpx) ---------------------------------------------------------------------------------

async def bench_httpx(base: str, concurrency: int, total: int, max_tokens: int, model: str,
                      keepalive: int | None = None, drain: bool = False) -> list[dict]:
    import httpx

    async def one_request(client, base, max_tokens, model):
        t0 = time.perf_counter()
        first = None
        first_line = None
        n = 0
        payload = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                   "min_tokens": max_tokens, "ignore_eos": True,
                   "stream": True, "temperature": 0.0}
        async with client.stream("POST", f"{base}/v1/completions", json=payload) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                if line.strip() == "data: [DONE]":
                    if drain:       # the what-if variant: read the body to its end so the connection is reused
                        continue
                    break
                if first is None:
                    first = time.perf_counter()
                    first_line = line
                n += 1
        t1 = time.perf_counter()
        return {"t0_s": t0, "first_s": first, "end_s": t1, "tokens": n, "first_line": first_line}

    limits = httpx.Limits(max_connections=concurrency)
    if keepalive is not None:   # the what-if variant: keep every connection alive (bench.py keeps 20)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=keepalive)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        sem = asyncio.Semaphore(concurrency)

        async def guarded():
            async with sem:
                return await one_request(client, base, max_tokens, model)
        return await asyncio.gather(*[guarded() for _ in range(total)])


# --- vllm bench serve (aiohttp) -----------------------------------------------------------------------

class StreamedResponseHandler:
    """vLLM's (lib/endpoint_request_func.py): accumulates chunks into complete SSE messages."""

    def __init__(self):
        self.buffer = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def add_chunk(self, chunk_bytes: bytes) -> list[str]:
        self.buffer += self._decoder.decode(chunk_bytes)
        messages = []
        while "\n\n" in self.buffer:
            message, self.buffer = self.buffer.split("\n\n", 1)
            message = message.strip()
            if message:
                messages.append(message)
        if self.buffer.startswith("data: "):
            content = self.buffer.removeprefix("data: ").strip()
            if content == "[DONE]":
                messages.append(self.buffer.strip())
                self.buffer = ""
            elif content:
                try:
                    json.loads(content)
                    messages.append(self.buffer.strip())
                    self.buffer = ""
                except json.JSONDecodeError:
                    pass
        return messages


async def vllm_aiohttp(base: str, concurrency: int, total: int, max_tokens: int, model: str) -> list[dict]:
    import aiohttp

    api_url = f"{base}/v1/completions"

    async def request_func(session) -> dict:
        payload = {"model": model, "prompt": PROMPT, "repetition_penalty": 1.0, "max_tokens": max_tokens,
                   "logprobs": None, "stream": True, "stream_options": {"include_usage": True},
                   "ignore_eos": True}
        st = time.perf_counter()
        first = None
        rid = None
        n = 0
        most_recent = st
        text = ""
        async with session.post(url=api_url, json=payload, headers={}) as response:
            assert response.status == 200, response.reason
            handler = StreamedResponseHandler()
            async for chunk_bytes in response.content.iter_any():
                chunk_bytes = chunk_bytes.strip()
                if not chunk_bytes:
                    continue
                for message in handler.add_chunk(chunk_bytes):
                    if message.startswith(":"):
                        continue
                    chunk = message.removeprefix("data: ")
                    if chunk != "[DONE]":
                        data = json.loads(chunk)
                        if choices := data.get("choices"):
                            t = choices[0].get("text")
                            timestamp = time.perf_counter()
                            if first is None:
                                first = timestamp
                                rid = data["id"]
                            most_recent = timestamp
                            n += 1
                            text += t or ""
        return {"t0_s": st, "first_s": first, "end_s": most_recent, "tokens": n,
                "first_line": f'data: {{"id": "{rid}"}}' if rid else None}

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=300,
                                     use_dns_cache=True, keepalive_timeout=60, enable_cleanup_closed=True,
                                     force_close=False, ssl=False)
    session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                    timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))
    try:
        await request_func(session)          # "Starting initial single prompt test run..." (not recorded)
        semaphore = asyncio.Semaphore(concurrency)

        async def limited_request_func():
            async with semaphore:
                return await request_func(session)
        tasks = [asyncio.create_task(limited_request_func()) for _ in range(total)]
        return await asyncio.gather(*tasks)
    finally:
        await session.close()


async def bench_httpx_keepalive(base: str, concurrency: int, total: int, max_tokens: int, model: str) -> list[dict]:
    """bench.py with max_keepalive_connections=C (not bench.py: the keep-alive hypothesis's what-if)."""
    return await bench_httpx(base, concurrency, total, max_tokens, model, keepalive=concurrency)


async def bench_httpx_drain(base: str, concurrency: int, total: int, max_tokens: int, model: str) -> list[dict]:
    """bench.py reading each response to its end instead of `break` at [DONE] (not bench.py: a what-if).

    bench.py leaves the loop at `data: [DONE]`, before httpcore has read the chunked body's end, so closing
    the response closes the connection (httpcore reuses a connection only when both h11 sides are DONE):
    every request opens a new TCP connection, whatever the keep-alive limits."""
    return await bench_httpx(base, concurrency, total, max_tokens, model, drain=True)


CLIENTS = {"bench_httpx": bench_httpx, "bench_httpx_keepalive": bench_httpx_keepalive,
           "bench_httpx_drain": bench_httpx_drain, "vllm_aiohttp": vllm_aiohttp}


def versions(name: str) -> dict:
    from importlib.metadata import version
    httpx_libs = ("httpx", "httpcore", "h11", "anyio")
    libs = {"bench_httpx": httpx_libs, "bench_httpx_keepalive": httpx_libs, "bench_httpx_drain": httpx_libs,
            "vllm_aiohttp": ("aiohttp", "yarl", "multidict")}
    return {lib: version(lib) for lib in libs[name]}


def main() -> None:
    ap = argparse.ArgumentParser(description="one closed-loop client run against an OpenAI streaming endpoint")
    ap.add_argument("--client", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="mock-engine")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for lib in versions(a.client):      # import before the clock starts: CPU seconds are the run's, not imports'
        importlib.import_module(lib)
    cpu0, wall0 = os.times(), time.perf_counter()
    res = asyncio.run(CLIENTS[a.client](a.base, a.concurrency, a.total, a.max_tokens, a.model))
    cpu1, wall = os.times(), time.perf_counter() - wall0
    for r in res:
        r["rid"] = _rid(r.pop("first_line"))
    out = {"client": a.client, "concurrency": a.concurrency, "total": a.total, "max_tokens": a.max_tokens,
           "python": sys.version.split()[0], "versions": versions(a.client), "wall_s": wall,
           "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system), "cpu_sys_s": cpu1.system - cpu0.system,
           "records": res}
    with open(a.out, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
