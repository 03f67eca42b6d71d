"""A mock OpenAI-compatible streaming engine with a batched decode step (stdlib asyncio only).

It stands in for vLLM / trtllm-serve in the client-overhead experiment (README.md here): it answers
`POST /v1/completions` with `stream: true` the way an engine with continuous batching does, and costs
as little server CPU as a Python server can, so that what a client measures on top of the server's own
time-to-first-token is the client's (and the loopback transport's) share.

Engine model: one step every `step_ms` on a free-running clock. At each step every open stream gets
one server-sent-event chunk (one token) in one `transport.write`; a request received before a step
(plus `prefill_ms`) gets its first token at that step. After `max_tokens` tokens (the request's, as
`ignore_eos` asks) it sends a `usage` chunk when `stream_options.include_usage` is set (as vLLM does),
`data: [DONE]` and the end of the chunked body; the connection stays open for the next request
(HTTP/1.1 keep-alive, as uvicorn). Chunks look like vLLM's completion chunks (same keys, about the same
size) so the client parses what it parses against vLLM.

Per request the server records, on its monotonic clock (`time.perf_counter`, CLOCK_MONOTONIC on Linux,
the clock both clients read), when it had the whole request (`recv_s`) and when it wrote the first token
chunk (`first_s`); `GET /stats` returns those records, the process's CPU seconds and how late the steps
fired, and `POST /reset` clears them.

    python mock_server.py --port 0 --step-ms 5   # prints "PORT <n>" when it listens
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

MODEL = "mock-engine"


class Stream:
    """One open streaming response: its transport, id, tokens left and timestamps."""

    __slots__ = ("conn", "rid", "left", "usage", "token_chunk", "recv_s", "first_s", "ready_s")

    def __init__(self, conn: "Conn", rid: int, max_tokens: int, usage: bool, recv_s: float, ready_s: float):
        self.conn, self.rid, self.left, self.usage = conn, rid, max_tokens, usage
        self.recv_s, self.ready_s, self.first_s = recv_s, ready_s, None
        # vLLM's completion chunk (serving_completion.py CompletionStreamResponse), one token of text.
        body = json.dumps({"id": f"cmpl-{rid}", "object": "text_completion", "created": int(time.time()),
                           "model": MODEL, "choices": [{"index": 0, "text": " tok", "logprobs": None,
                                                        "finish_reason": None, "stop_reason": None}],
                           "usage": None}, separators=(",", ":"))
        self.token_chunk = _chunk(f"data: {body}\n\n")

    def last_chunks(self) -> bytes:
        """The final token's finish chunk, the optional usage chunk, [DONE] and the chunked-body end."""
        out = []
        if self.usage:
            body = json.dumps({"id": f"cmpl-{self.rid}", "object": "text_completion", "created": int(time.time()),
                               "model": MODEL, "choices": [], "usage": {"prompt_tokens": 12, "total_tokens": 268,
                                                                        "completion_tokens": 256}},
                              separators=(",", ":"))
            out.append(_chunk(f"data: {body}\n\n"))
        out.append(_chunk("data: [DONE]\n\n"))
        out.append(b"0\r\n\r\n")
        return b"".join(out)


def _chunk(text: str) -> bytes:
    """One HTTP/1.1 chunked-transfer chunk (uvicorn writes one per server-sent event)."""
    data = text.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


class Engine:
    """The batched step loop: admits ready requests, writes one token to every open stream per step."""

    def __init__(self, step_s: float, prefill_s: float):
        self.step_s, self.prefill_s = step_s, prefill_s
        self.waiting: list[Stream] = []
        self.running: list[Stream] = []
        self.records: list[dict] = []
        self.late_s: list[float] = []       # how late each step fired against its schedule
        self.write_s: list[float] = []      # how long each step's writes took (server CPU per step)
        self.next_rid = 0
        self.connections = 0                # TCP connections accepted (a client that reopens them shows here)
        self.wake = asyncio.Event()

    def submit(self, conn: "Conn", body: dict, recv_s: float) -> None:
        self.next_rid += 1
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        s = Stream(conn, self.next_rid, int(body.get("max_tokens", 256)), usage, recv_s, recv_s + self.prefill_s)
        self.waiting.append(s)
        self.wake.set()

    async def run(self) -> None:
        due = time.perf_counter()
        while True:
            if not self.running and not self.waiting:
                # Idle engine: no step runs; the next request starts the clock (as vLLM's busy loop does).
                self.wake.clear()
                await self.wake.wait()
                due = time.perf_counter()
            due += self.step_s
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter()
            self.late_s.append(now - due)
            if now - due > self.step_s:     # the loop fell behind by a whole step: do not burst to catch up
                due = now
            if self.waiting:
                ready = [s for s in self.waiting if s.ready_s <= now]
                if ready:
                    self.waiting = [s for s in self.waiting if s.ready_s > now]
                    self.running.extend(ready)
            done = []
            for s in self.running:
                if s.conn.closed:
                    done.append(s)
                    continue
                if s.first_s is None:
                    s.first_s = time.perf_counter()
                s.left -= 1
                if s.left > 0:
                    s.conn.transport.write(s.token_chunk)
                else:
                    s.conn.transport.write(s.token_chunk + s.last_chunks())
                    done.append(s)
            self.write_s.append(time.perf_counter() - now)
            if done:
                gone = set(map(id, done))
                self.running = [s for s in self.running if id(s) not in gone]
                for s in done:
                    self.records.append({"rid": s.rid, "recv_s": s.recv_s, "first_s": s.first_s})
                    s.conn.busy = False
                    s.conn.maybe_next()

    def stats(self) -> dict:
        t = os.times()
        return {"records": self.records, "cpu_user_s": t.user, "cpu_sys_s": t.system,
                "connections": self.connections, "late_s": self.late_s, "write_s": self.write_s,
                "step_s": self.step_s, "prefill_s": self.prefill_s}

    def reset(self) -> None:
        self.records, self.late_s, self.write_s, self.connections = [], [], [], 0


HEADERS = (b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
           b"transfer-encoding: chunked\r\n\r\n")


class Conn(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection: parses requests (one at a time) and hands them to the engine."""

    def __init__(self, engine: Engine):
        self.engine, self.buf, self.busy, self.closed, self.transport = engine, b"", False, False, None

    def connection_made(self, transport):
        self.transport = transport
        self.engine.connections += 1

    def connection_lost(self, exc):
        self.closed = True

    def data_received(self, data: bytes):
        self.buf += data
        self.maybe_next()

    def maybe_next(self) -> None:
        """Parse one complete request from the buffer if the connection is not streaming a response."""
        if self.busy or self.closed:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        if len(self.buf) < end + 4 + length:
            return
        body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
        recv_s = time.perf_counter()
        method, path = head[0].split(" ")[:2]
        if method == "POST" and path.endswith("/completions"):
            self.busy = True
            self.transport.write(HEADERS)
            self.engine.submit(self, json.loads(body), recv_s)
            return
        if path == "/stats":
            reply = json.dumps(self.engine.stats()).encode()
        elif path == "/reset":
            self.engine.reset()
            reply = b"{}"
        else:
            reply = json.dumps({"object": "list", "data": [{"id": MODEL, "root": MODEL}]}).encode()
        self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(reply), reply))
        self.maybe_next()


async def serve(port: int, step_ms: float, prefill_ms: float) -> None:
    engine = Engine(step_ms / 1000.0, prefill_ms / 1000.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(engine), "127.0.0.1", port, backlog=1024)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    await engine.run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    ap.add_argument("--step-ms", type=float, default=5.0, help="decode step (inter-token latency), ms")
    ap.add_argument("--prefill-ms", type=float, default=0.0, help="fixed delay before a request may join a step")
    a = ap.parse_args()
    asyncio.run(serve(a.port, a.step_ms, a.prefill_ms))


if __name__ == "__main__":
    main()
