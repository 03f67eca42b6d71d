"""Replay a trace against an OpenAI-compatible server, streaming every token.

Each request is one `POST /v1/completions` with `stream: true`; every server-sent chunk that
carries a token is stamped on arrival. The output length is forced with `max_tokens` plus the
server's own switch where it has one (`SERVERS` below); the prompt is built to the requested token
count with the server's tokenizer endpoint where it has one (`calibrate.replay.prompts`).

Bounded: at most `max_requests` requests (the caller trims the trace), `timeout_s` wall seconds in
all — server detection and prompt tokenization included, so a server that trickles keep-alive
bytes forever is cut off at the deadline like one that never answers; connection failures end the
replay with `EngineUnreachable` carrying what was measured. Bounded in memory: a reply is read in
pieces and abandoned past `MAX_REPLY_BYTES` (a JSON answer) or `MAX_LINE_BYTES` per server-sent
line and `stream_byte_cap(max_tokens)` per stream, so an endless body costs a few MiB, not the
machine. A reply that is not what an OpenAI-compatible server sends (not JSON, no token list) is
a `ConfigError` naming the endpoint (one line, exit 2), as is a URL that cannot be used (bad scheme,
port out of range). Only loopback addresses are accepted unless the caller allows remote hosts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from calibrate.replay.dispatch import Dispatcher
from calibrate.replay.errors import EngineUnreachable, ReplayInterrupted
from calibrate.replay.prompts import build_prompts
from calibrate.replay.records import FAILED, REJECTED, Measurement, ReplayResult
from sim.errors import ConfigError
from workloads.request import Request


@dataclass(frozen=True)
class ServerKind:
    """What one server family offers beyond plain OpenAI completions.

    `probe`: (method, path, json body) that answers 200 on this family (tried in `SERVERS` order);
    `tokenize`: (path, body builder(text, model)) of its tokenizer endpoint, whose reply has a
    `tokens` list; `force`: extra request fields, given the output length, that stop the model
    ending early; `include_usage`: it reports `usage.completion_tokens` in the stream when asked.
    """

    name: str
    probe: tuple[str, str, dict | None]
    tokenize: tuple[str, Callable[[str, str], dict]] | None
    force: Callable[[int], dict] = lambda n: {}
    include_usage: bool = False
    source: str = ""


def max_stream_chunks(max_tokens: int) -> int:
    """Most completion chunks one stream of `max_tokens` may send before it is abandoned as a server that does
    not stop: a chunk carries at most one token here (`choices` of n=1), so twice the budget plus a few for
    role/usage/terminator chunks and for tokens decoded past max_tokens (llama-cpp-python: `SERVERS`)."""
    return 2 * max_tokens + 16


SERVERS: tuple[ServerKind, ...] = (
    ServerKind(
        "llama-cpp-python",
        ("POST", "/extras/tokenize", {"input": "a"}),
        ("/extras/tokenize", lambda text, model: {"input": text}),
        # min_tokens masks the EOS logit until that many tokens exist (MinTokensLogitsProcessor). Masked for
        # the whole stream, not just n tokens: llama-cpp-python 0.3.x's streaming loop (Llama._create_completion)
        # skips its `len(completion_tokens) >= max_tokens` check while it holds back an incomplete UTF-8
        # character (`multibyte_fix ... continue`), so it can decode past max_tokens; with EOS unmasked from
        # token n on, such an overrun could end on EOS, finish_reason "stop" with more tokens than asked
        # (the tiny random-weight test model at max_tokens 8-11: 1 of 800 streams ended "stop", 191 overran by
        # 1-7 tokens and ended "length"; masked through max_stream_chunks: 0 of 800 "stop")
        force=lambda n: {"min_tokens": max_stream_chunks(n)},
        source="llama_cpp/server/app.py (0.3.x): /extras/tokenize, CreateCompletionRequest.min_tokens",
    ),
    ServerKind(
        "llama-server",
        ("GET", "/props", None),
        ("/tokenize", lambda text, model: {"content": text, "add_special": True}),
        force=lambda n: {"ignore_eos": True},
        include_usage=True,
        source="llama.cpp tools/server/README.md: POST /tokenize {content, add_special}; ignore_eos",
    ),
    ServerKind(
        "ollama",
        ("GET", "/api/version", None),
        None,  # no tokenizer endpoint: prompt lengths are estimates
        include_usage=True,
        source="ollama docs/openai.md: /v1/completions, stream_options.include_usage",
    ),
    ServerKind(
        "vllm",
        ("GET", "/version", None),
        ("/tokenize", lambda text, model: {"model": model, "prompt": text}),
        force=lambda n: {"ignore_eos": True, "min_tokens": n},
        include_usage=True,
        source="vllm/entrypoints/openai/protocol.py: TokenizeCompletionRequest; sampling params ignore_eos, min_tokens",
    ),
)
GENERIC = ServerKind("openai-compatible", ("GET", "/v1/models", None), None)

# Size bounds of what a server may send. A streamed completion chunk is one `data: {...}` line of a
# few hundred bytes (id, model name, one token's text, a finish_reason; ~250 B from vLLM and
# llama-server); a line of 1 MiB is no completion chunk. A whole stream may carry, per requested
# token, up to 64 KiB (room for logprobs and long ids), plus 1 MiB of headers and pings. A plain
# JSON reply (model list, tokenizer output of a prompt of at most 2^31 tokens is far more, but the
# prompts built here are at most a context window: 8 bytes per token id of a 1M-token prompt) is
# capped at 16 MiB.
MAX_LINE_BYTES = 1 << 20
MAX_REPLY_BYTES = 16 << 20
_STREAM_BYTES_PER_TOKEN = 64 << 10


def stream_byte_cap(max_tokens: int) -> int:
    """Most bytes one streamed completion of `max_tokens` tokens may take before it is abandoned."""
    return MAX_LINE_BYTES + _STREAM_BYTES_PER_TOKEN * max(1, max_tokens)


class ReplyTooLarge(Exception):
    """A server sent more bytes than the bound of what it was asked for."""


async def _iter_lines(resp, *, max_line_bytes: int, max_total_bytes: int):
    """The response body's lines (decoded, without the line break), read in pieces: raises
    `ReplyTooLarge` as soon as one line or the whole body passes its bound, whatever the server
    keeps sending (httpx's own `aiter_lines` would buffer an endless line whole)."""
    buf = b""
    total = 0
    async for piece in resp.aiter_bytes():
        total += len(piece)
        if total > max_total_bytes:
            raise ReplyTooLarge(f"reply passed {max_total_bytes:,} bytes")
        buf += piece
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1:]
            yield line.rstrip(b"\r").decode(errors="replace")
        if len(buf) > max_line_bytes:
            raise ReplyTooLarge(f"a line passed {max_line_bytes:,} bytes")
    if buf:
        yield buf.rstrip(b"\r").decode(errors="replace")


async def _read_capped(resp, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """A whole (non-streamed) body, refusing to hold more than `max_bytes`."""
    chunks, total = [], 0
    async for piece in resp.aiter_bytes():
        total += len(piece)
        if total > max_bytes:
            raise ReplyTooLarge(f"reply passed {max_bytes:,} bytes")
        chunks.append(piece)
    return b"".join(chunks)


async def _request_json(client, method: str, path: str, body: dict | None = None, *, timeout=None):
    """(status, parsed JSON or None when the body is not JSON) of one bounded request."""
    kw = {} if timeout is None else {"timeout": timeout}
    async with client.stream(method, path, json=body, **kw) as r:
        raw = await _read_capped(r)
    try:
        return r.status_code, json.loads(raw)
    except ValueError:
        return r.status_code, None


def _not_openai(base: str, path: str, what: str) -> ConfigError:
    return ConfigError(f"{base}{path} {what}; is this an OpenAI-compatible server?", field="--endpoint")


def check_endpoint(url: str, *, allow_remote: bool = False) -> str:
    """The base URL (scheme://host:port, no trailing /v1); refuses a non-loopback host unless allowed."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as e:
        raise ConfigError(f"unusable URL {url!r}: {e}", field="--endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"not an http(s) URL: {url!r}", field="--endpoint")
    host = parts.hostname
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise ConfigError(f"{host} is not a loopback address; pass --allow-remote to drive a remote server",
                          field="--endpoint")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass
class _Server:
    kind: ServerKind
    model: str
    eog_bias: dict[str, float] = field(default_factory=dict)


async def _detect(client, base: str) -> _Server:
    """Which server family answers at `base`, and its model name; EngineUnreachable if nothing does."""
    import httpx

    try:
        status, doc = await _request_json(client, "GET", "/v1/models")
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise EngineUnreachable(f"cannot connect to {base}: {type(e).__name__}: {e}") from e
    except ReplyTooLarge as e:
        raise _not_openai(base, "/v1/models", f"sent too much ({e})") from None
    if status != 200:
        raise EngineUnreachable(f"{base}/v1/models answered HTTP {status}; is this an OpenAI-compatible server?")
    if not isinstance(doc, dict):
        raise _not_openai(base, "/v1/models", "answered something that is not a JSON object")
    try:
        model = str(doc["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        model = "default"
    for kind in SERVERS:
        method, path, body = kind.probe
        try:
            p_status, _ = await _request_json(client, method, path, body)
        except (httpx.HTTPError, ReplyTooLarge):
            continue
        if p_status == 200:
            return _Server(kind, model)
    return _Server(GENERIC, model)


# End-of-generation markers of common chat vocabularies. Where the server cannot ignore EOS for every
# end-of-generation token (llama-cpp-python's min_tokens masks only EOS), those that tokenize to a
# single token get a -100 logit bias, so a forced-length request does not stop early.
_EOG_MARKERS = ("<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>")


async def _token_ids(client, server: _Server, text: str) -> list[int]:
    import httpx

    path, body = server.kind.tokenize
    try:
        status, doc = await _request_json(client, "POST", path, body(text, server.model))
    except ReplyTooLarge as e:
        raise _not_openai(str(client.base_url).rstrip("/"), path, f"sent too much ({e})") from None
    if status != 200:
        raise httpx.HTTPStatusError(f"{path} answered HTTP {status}", request=None, response=None)
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list):
        raise _not_openai(str(client.base_url).rstrip("/"), path, "answered without a token list")
    return tokens


async def _eog_bias(client, server: _Server) -> dict[str, float]:
    base = await _token_ids(client, server, "")
    bias = {}
    for marker in _EOG_MARKERS:
        ids = (await _token_ids(client, server, marker))[len(base):]
        if len(ids) == 1:
            bias[str(ids[0])] = -100.0
    return bias


class _ConnectionLost(Exception):
    pass


async def _one(client, server: _Server, prompt: str, meas: Measurement, clock) -> None:
    """Send one request and stamp every streamed token; any failure lands in `meas`."""
    import httpx

    n_out = meas.requested_output_tokens
    body = {"model": server.model, "prompt": prompt, "max_tokens": n_out, "stream": True,
            **server.kind.force(n_out)}
    if server.kind.include_usage:
        body["stream_options"] = {"include_usage": True}
    if server.eog_bias:
        body["logit_bias"] = server.eog_bias
    finish_reason = None
    got_done = False
    meas.arrival_s = clock()
    max_chunks = max_stream_chunks(n_out)  # more is a server that does not stop
    chunks = 0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                try:
                    text = (await _read_capped(resp, 64 << 10)).decode(errors="replace")
                except ReplyTooLarge:
                    text = "(error body over 64 KiB)"
                text = text[:200].replace("\n", " ")
                status = REJECTED if 400 <= resp.status_code < 500 else FAILED
                meas.fail(f"HTTP {resp.status_code}: {text}", status=status)
                return
            async for line in _iter_lines(resp, max_line_bytes=MAX_LINE_BYTES, max_total_bytes=stream_byte_cap(n_out)):
                t = clock()
                if not line.startswith("data:"):
                    continue  # blank separators and ": ping" comments
                data = line[5:].strip()
                if data == "[DONE]":
                    got_done = True
                    break
                chunks += 1
                if chunks > max_chunks:
                    meas.fail(f"server kept streaming: {chunks} chunks for max_tokens={n_out}; stopped reading")
                    return
                try:
                    chunk = json.loads(data)
                except ValueError:
                    meas.fail(f"unparseable stream chunk after {len(meas.token_times_s)} tokens: {data[:80]!r}")
                    return
                if not isinstance(chunk, dict):
                    meas.fail(f"stream chunk is not a JSON object after {len(meas.token_times_s)} tokens: {data[:80]!r}")
                    return
                if "error" in chunk:
                    meas.fail(f"server error after {len(meas.token_times_s)} tokens: {str(chunk['error'])[:200]}")
                    return
                try:
                    usage = chunk.get("usage")
                    if usage and usage.get("completion_tokens") is not None:
                        meas.output_tokens = int(usage["completion_tokens"])
                    for choice in chunk.get("choices") or ():
                        fr = choice.get("finish_reason")
                        # a chunk carries a token unless it is a bare terminator (finish_reason, no text)
                        if fr is None or choice.get("text"):
                            meas.token(t)
                        if fr is not None:
                            finish_reason = fr
                except (AttributeError, TypeError, ValueError, OverflowError):
                    meas.fail(f"malformed stream chunk after {len(meas.token_times_s)} tokens: {data[:80]!r}")
                    return
    except httpx.TimeoutException as e:
        meas.fail(f"timed out after {len(meas.token_times_s)} tokens ({type(e).__name__})")
        return
    except ReplyTooLarge as e:
        meas.fail(f"reply too large after {len(meas.token_times_s)} tokens: {e}; stopped reading")
        return
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        meas.fail(f"connection lost after {len(meas.token_times_s)} of {n_out} tokens: {type(e).__name__}: {e}")
        raise _ConnectionLost(str(e)) from e
    if finish_reason is None:
        hint = ""
        if got_done and server.kind.name == "llama-cpp-python":
            hint = " (llama-cpp-python interrupts a stream when another request arrives: start it with --interrupt_requests False)"
        meas.fail(f"stream ended early: {len(meas.token_times_s)} of {n_out} tokens, no finish_reason"
                  + ("" if got_done else " and no [DONE]") + hint)
        return
    if finish_reason == "length":
        # stopped by max_tokens: n_out tokens, however they were chunked — and whatever the usage block
        # says: llama-cpp-python counts completion_tokens by re-tokenizing the generated text, which merges
        # pieces (seen: 11 reported for 16 generated by a random-weight model). Tokens llama-cpp-python
        # decodes past max_tokens while it holds back an incomplete character (`SERVERS`) are not counted:
        # the request is the n_out tokens asked for
        meas.output_tokens = n_out
    if not meas.token_times_s:
        meas.fail(f"finished ({finish_reason}) without sending a token")
        return
    meas.complete(meas.token_times_s[-1])


async def _alive(client) -> bool:
    import httpx

    try:  # 3 s in all: a server trickling bytes would reset a per-read timeout forever
        status, _ = await asyncio.wait_for(_request_json(client, "GET", "/v1/models", timeout=3.0), 3.0)
        return status == 200
    except (httpx.HTTPError, ReplyTooLarge, asyncio.TimeoutError):
        return False


async def replay_http_async(
    requests: Sequence[Request],
    endpoint: str,
    *,
    concurrency: int | None = None,
    timeout_s: float = 600.0,
    allow_remote: bool = False,
) -> ReplayResult:
    """Replay `requests` against the server at `endpoint`; see the module docstring.

    SIGINT and SIGTERM stop the replay like its deadline does: requests in flight are cancelled
    (their tokens kept) and `ReplayInterrupted` carries what was measured."""
    import httpx

    if not requests:
        raise ConfigError("the trace has no requests", field="trace")
    base = check_endpoint(endpoint, allow_remote=allow_remote)
    deadline = time.perf_counter() + timeout_s
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    timeout = httpx.Timeout(connect=5.0, read=timeout_s, write=30.0, pool=None)
    with _stop_on_signals() as stop:
        async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as client:

            async def setup():
                server = await _detect(client, base)
                tokenize = None
                if server.kind.tokenize is not None:
                    async def tokenize(text: str) -> int:
                        return len(await _token_ids(client, server, text))
                    if server.kind.name == "llama-cpp-python":
                        server.eog_bias = await _eog_bias(client, server)
                try:
                    prompts, prompt_source = await build_prompts(requests, tokenize, secrets.token_hex(2))
                except httpx.HTTPError as e:
                    raise EngineUnreachable(f"tokenizing prompts at {base} failed: {type(e).__name__}: {e}") from e
                return server, prompts, prompt_source

            server, prompts, prompt_source = await _until(setup(), deadline, stop, base, timeout_s)
            records, error, engine_lost = await _drive(client, server, requests, prompts, concurrency,
                                                       deadline, timeout_s, stop)
    config = {
        "target": "endpoint", "endpoint": base, "server": server.kind.name, "model": server.model,
        "concurrency": concurrency, "prompt_tokens_source": prompt_source,
        "forced_output_fields": sorted(server.kind.force(1)) + (["logit_bias"] if server.eog_bias else []),
    }
    result = ReplayResult(tuple(records), config, {}, error)
    if stop.is_set():
        raise ReplayInterrupted(partial=result)
    if engine_lost:
        raise EngineUnreachable(error, partial=result)
    return result


class _stop_on_signals:
    """An `asyncio.Event` set by SIGINT or SIGTERM while the `with` block runs (the loop's own
    handlers, so the replay can stop cleanly and keep its records instead of being torn down by
    KeyboardInterrupt). Where handlers cannot be installed (not the main thread) it is never set."""

    _SIGNALS = ("SIGINT", "SIGTERM")

    def __enter__(self) -> asyncio.Event:
        import signal

        self.event = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.installed = []
        for name in self._SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                self.loop.add_signal_handler(sig, self.event.set)
            except (RuntimeError, NotImplementedError, ValueError):  # not the main thread, or Windows
                continue
            self.installed.append(sig)
        return self.event

    def __exit__(self, *exc) -> None:
        for sig in self.installed:
            self.loop.remove_signal_handler(sig)


async def _until(coro, deadline: float, stop: asyncio.Event, base: str, timeout_s: float):
    """`await coro`, but give up at `deadline` (EngineUnreachable) or when `stop` is set
    (ReplayInterrupted, nothing measured yet)."""
    task = asyncio.ensure_future(coro)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, timeout=max(0.0, deadline - time.perf_counter()),
                                 return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, stopper, return_exceptions=True)
    if stop.is_set():
        raise ReplayInterrupted(partial=None)
    raise EngineUnreachable(f"{base} gave no usable answer within --timeout-s {timeout_s:g} s "
                            "(detecting the server and tokenizing the prompts)")


async def _drive(client, server, requests, prompts, concurrency, deadline, timeout_s, stop):
    """Send requests as the dispatcher releases them until all are done, `deadline` passes or
    `stop` is set; returns (records, error, engine_lost)."""
    dispatcher = Dispatcher(requests, concurrency)
    wall0 = time.perf_counter()

    def clock() -> float:
        return dispatcher.start_s + (time.perf_counter() - wall0)

    measurements: list[Measurement] = []
    tasks: dict[asyncio.Task, Measurement] = {}
    error = ""
    engine_lost = False
    stopper = asyncio.ensure_future(stop.wait())
    while not dispatcher.done:
        if stop.is_set():
            error = f"interrupted after {time.perf_counter() - wall0:.1f} s"
            break
        if time.perf_counter() >= deadline:
            error = f"timeout after {timeout_s:g} s"
            break
        for req, ready_s in dispatcher.ready(clock()):
            text, n_prompt = prompts[req.id]
            m = Measurement(req.id, ready_s, n_prompt, req.output_tokens)
            measurements.append(m)
            tasks[asyncio.create_task(_one(client, server, text, m, clock))] = m
        if dispatcher.done:
            break
        nxt = dispatcher.next_ready_s()
        wait_s = deadline - time.perf_counter()
        if nxt is not None:
            wait_s = min(wait_s, nxt - clock())
        wait_s = max(wait_s, 0.0)
        done, _ = await asyncio.wait([*tasks, stopper], timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        lost = None
        for task in done:
            if task is stopper:
                continue
            m = tasks.pop(task)
            dispatcher.finished(m.id, clock())
            if isinstance(task.exception(), _ConnectionLost):
                lost = m.reason
        if lost is not None and not await _alive(client):
            error = f"engine stopped answering after {time.perf_counter() - wall0:.1f} s: {lost}"
            engine_lost = True
            break
    stopper.cancel()
    for task, m in tasks.items():  # stopped early: cancel what is in flight, keep its tokens
        task.cancel()
        m.fail(f"cancelled: {error}")
    await asyncio.gather(stopper, *tasks, return_exceptions=True)
    never_sent = dispatcher.abandon()
    records = [m.freeze() for m in measurements]
    records += [Measurement(r.id, r.arrival_s, prompts[r.id][1], r.output_tokens).freeze(f"not sent: {error}")
                for r in never_sent]
    return records, error, engine_lost


def replay_http(requests: Sequence[Request], endpoint: str, **kw) -> ReplayResult:
    """Synchronous wrapper of `replay_http_async`."""
    return asyncio.run(replay_http_async(requests, endpoint, **kw))


__all__ = ["SERVERS", "ServerKind", "check_endpoint", "replay_http", "replay_http_async"]
