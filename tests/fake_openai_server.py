"""A tiny scripted OpenAI-compatible streaming server for replay tests (stdlib only, loopback).

It answers `GET /v1/models` and streams `POST /v1/completions` as server-sent events in chunked
transfer encoding, one chunk per token. Behaviours, chosen per server:

- "ok": every request streams `max_tokens` tokens, a finish chunk and `[DONE]`.
- "stop_early": every request streams 3 tokens, then ends the response cleanly (no finish_reason,
  no [DONE]) — a stream that stops early.
- "die_after:N": requests 1..N are served normally; request N+1 streams 2 tokens, then the server
  closes the connection mid-body and stops listening — a server that dies mid-run.
- "slow": every token 0.1 s apart (a stream that takes a while, to interrupt).
- "llama_cpp_overrun": llama-cpp-python 0.3.x (it answers POST /extras/tokenize, one token per word after a
  BOS) whose streaming loop decodes LLAMA_CPP_OVERRUN tokens past `max_tokens` (it skips its max_tokens check
  while it holds back an incomplete UTF-8 character: Llama._create_completion `multibyte_fix ... continue`)
  and then samples EOS, finish_reason "stop", unless `min_tokens` still masks EOS
  (MinTokensLogitsProcessor), when its max_tokens check ends the stream, finish_reason "length".

Misbehaving servers (tests/test_hostile.py; each stops when the client goes away):

- "endless": streams token chunks forever, never a finish_reason.
- "huge_line": one server-sent line that never ends (`data: xxxx...` with no line break).
- "keepalive": `: ping` comments every 20 ms forever, never a token.
- "bad_chunks": chunks that are JSON but not completion chunks (`[1, 2]`, `{"choices": 5}`).
- "garbage": `GET /v1/models` answers 200 with a body that is not JSON.
- "trickle_models": `GET /v1/models` promises a body and sends one byte every 50 ms forever.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


LLAMA_CPP_OVERRUN = 3  # tokens decoded past max_tokens while a character is held back ("llama_cpp_overrun")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, obj: dict, code: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        mode = self.server.mode
        if self.path == "/v1/models" and mode == "garbage":
            body = b"<html>this is not JSON</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/v1/models" and mode == "trickle_models":
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the client gave up
                return
        if self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/extras/tokenize" and self.server.mode == "llama_cpp_overrun":
            self._json({"tokens": [1] + [5] * len(str(body.get("input", "")).split())})
            return
        if self.path != "/v1/completions":
            self._json({"error": "not found"}, 404)
            return
        srv = self.server
        with srv.lock:
            srv.count += 1
            index = srv.count
        mode, _, arg = srv.mode.partition(":")
        dying = mode == "die_after" and index > int(arg)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        # the handler closes the connection after every stream: say so, or the client may send the
        # next request on a connection the server is closing (a request failed with no token at all)
        self.send_header("Connection", "close")
        self.end_headers()

        def event(obj) -> None:
            data = (b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        if mode in _HOSTILE:
            try:
                _HOSTILE[mode](self, event)
            except OSError:  # the client gave up: what a hostile server hopes never happens
                pass
            self.close_connection = True
            return
        n_tokens = int(body.get("max_tokens", 16))
        finish = "length"
        if mode == "llama_cpp_overrun":
            n_tokens += LLAMA_CPP_OVERRUN
            finish = "length" if int(body.get("min_tokens", 0)) > n_tokens else "stop"
        if mode == "stop_early":
            n_tokens = 3
        if dying:
            n_tokens = 2
        for i in range(n_tokens):
            if mode == "slow":
                time.sleep(0.1)
            event({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]})
        if dying:
            self.wfile.flush()
            srv.stop_listening()
            self.connection.shutdown(socket.SHUT_RDWR)  # mid-body: no terminating chunk
            self.close_connection = True
            return
        if mode != "stop_early":
            event({"choices": [{"index": 0, "text": "", "finish_reason": finish}]})
            event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


def _endless(handler, event) -> None:
    i = 0
    while True:
        event({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]})
        i += 1


def _huge_line(handler, event) -> None:
    piece = b"x" * 65536
    handler.wfile.write(b"%x\r\n%s\r\n" % (6, b"data: "))
    while True:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        handler.wfile.flush()


def _keepalive(handler, event) -> None:
    while True:
        data = b": ping\n\n"
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
        time.sleep(0.02)


def _bad_chunks(handler, event) -> None:
    event(b"[1, 2]")
    event({"choices": 5})
    event(b"[DONE]")
    handler.wfile.write(b"0\r\n\r\n")


_HOSTILE = {"endless": _endless, "huge_line": _huge_line, "keepalive": _keepalive, "bad_chunks": _bad_chunks}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    latest: "_Server | None" = None  # the server started last (tests wait on its request count)

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.count = 0
        self.lock = threading.Lock()

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-stream (an interrupted replay) is no server error: quiet."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def stop_listening(self) -> None:
        threading.Thread(target=self.shutdown, daemon=True).start()
        self.socket.close()


@contextlib.contextmanager
def fake_server(mode: str = "ok") -> Iterator[str]:
    """Run the scripted server on a free loopback port; yield its base URL."""
    srv = _Server(mode)
    _Server.latest = srv
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
