"""When the requests of a trace reach the server: open loop, sessions, closed loop (`ArrivalSource`).

The release rules of a workload, shared by the simulator (`sim.engine.replica`, `sim.cluster`) and the
replay against a real server (`calibrate.replay.dispatch`), so both send the same request at the
same moment. It lives with the workloads (the layer below the catalog and the engine) because it
is a property of the traffic, not of any engine.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from sim.errors import ConfigError
from workloads.request import Request


class ArrivalSource:
    """Streams requests from an iterator, one look-ahead item at a time.

    - Open loop: a request arrives at its `arrival_s`.
    - Sessions: a request with `think_s` whose session has an earlier request arrives at
      max(arrival_s, previous response done + think_s) (the `Request.think_s` contract).
    - Closed loop (`concurrency=N`): N clients each send the trace's next request when their
      previous one is done (completed or rejected), plus its `think_s` if any; all N start at
      time 0 and the trace's `arrival_s` values are ignored.
    """

    def __init__(self, requests: Iterable[Request], concurrency: int | None = None) -> None:
        if concurrency is not None and concurrency < 1:
            raise ConfigError(f"must be >= 1, got {concurrency}", field="--concurrency")
        self._it: Iterator[Request] = iter(requests)
        self._peek: Request | None = next(self._it, None)
        self._heap: list[tuple[float, int, Request]] = []
        self._seq = 0
        self._closed = concurrency
        self._last_arrival = 0.0
        # session id -> [requests sent and not done, parked followers, last done time]
        self._sessions: dict[str, list] = {}
        self.next_s = float("inf")  # earliest time another request may arrive (see next_time)
        if concurrency:
            for _ in range(concurrency):
                if not self._client_next(0.0):
                    break
        self._refresh()

    def _push(self, t: float, r: Request) -> None:
        heapq.heappush(self._heap, (t, self._seq, r))
        self._seq += 1
        if t < self.next_s:
            self.next_s = t

    def _refresh(self) -> None:
        t = self._heap[0][0] if self._heap else float("inf")
        if self._closed is None and self._peek is not None and self._peek.arrival_s < t:
            t = self._peek.arrival_s
        self.next_s = t

    def _pull(self) -> Request | None:
        r = self._peek
        if r is not None:
            self._peek = next(self._it, None)
            if r.arrival_s < self._last_arrival and self._closed is None:
                raise ConfigError(
                    f"{r.arrival_s:g} is before the previous request's {self._last_arrival:g} "
                    "(arrivals must be non-decreasing)", file=None, line=r.line, field="arrival_s")
            self._last_arrival = r.arrival_s
        return r

    def _client_next(self, t: float) -> bool:
        r = self._pull()
        if r is None:
            return False
        self._push(t + (r.think_s or 0.0), r)
        return True

    def _route(self, r: Request) -> None:
        """Open loop: when a request is sent. A request with `think_s` waits until every earlier
        request of its session is done, then `think_s` more (never before its `arrival_s`)."""
        sid = r.session_id
        if sid is None:
            self._push(r.arrival_s, r)
            return
        s = self._sessions.get(sid)
        if s is None:
            s = self._sessions[sid] = [0, deque(), None]  # in flight, parked followers, last done time
        if r.think_s is not None and (s[0] or s[1]):
            s[1].append(r)
            return
        s[0] += 1
        t = r.arrival_s
        if r.think_s is not None and s[2] is not None:
            t = max(t, s[2] + r.think_s)
        self._push(t, r)

    def next_time(self) -> float | None:
        """Earliest time another request may arrive (a lower bound), None when none will."""
        return None if self.next_s == float("inf") else self.next_s

    def due(self, now_s: float) -> list[tuple[float, Request]]:
        """Requests that have arrived by `now_s`, in arrival order, with their arrival times."""
        out = []
        heap = self._heap
        if self._closed is None:
            while self._peek is not None and self._peek.arrival_s <= now_s:
                r = self._pull()
                if r.session_id is None and not heap:  # plain open loop: in trace order already
                    out.append((r.arrival_s, r))
                else:
                    self._route(r)
        while heap and heap[0][0] <= now_s:
            t, _, r = heapq.heappop(heap)
            out.append((t, r))
        self._refresh()
        return out

    def done(self, request: Request, now_s: float) -> None:
        """A request finished (or was rejected) at `now_s`: release what waited for it."""
        if self._closed is not None:
            self._client_next(now_s)
            return
        s = self._sessions.get(request.session_id) if request.session_id is not None else None
        if s is None:
            return
        s[0] -= 1
        s[2] = now_s
        if not s[0] and s[1]:
            nxt = s[1].popleft()
            s[0] = 1
            self._push(max(nxt.arrival_s, now_s + nxt.think_s), nxt)

    @property
    def exhausted(self) -> bool:
        return self._peek is None and not self._heap

    def rejected(self, request: Request, now_s: float) -> None:
        """A request was refused at `now_s` (same release rules as `done`)."""
        self.done(request, now_s)

    def idle_wait(self, env, now_s: float):
        """What an idle replica waits for: the next arrival (None when none will come)."""
        t_next = self.next_time()
        return None if t_next is None else env.timeout(max(t_next - now_s, 0.0))


class PacedClients(ArrivalSource):
    """A benchmark client's semaphore (`vllm bench serve --max-concurrency C`; sim.bench.serve): C
    slots; the next request in release order takes the first slot free and is sent at max(its
    release `arrival_s`, that slot's freeing) (asyncio.Semaphore wakes its waiters first come, first
    served). A closed loop whose clients also wait for the next release."""

    def _client_next(self, t: float) -> bool:
        r = self._pull()
        if r is None:
            return False
        self._push(max(t, r.arrival_s), r)
        return True


class FrontEnd:
    """The server's front end between a client's send and the engine's queue (`EngineConfig.request_overhead_ms`):
    every request of `source` reaches the replica `delay_s` after it was sent, and is logged at its send
    time, so its TTFT and E2E latency include the delay and its TPOT does not. It models the per-request
    work outside the GPU steps: the HTTP server, chat template and tokenization before the queue, and
    detokenizing and streaming the first token back (charged up front too: a constant per request, and
    nothing in the engine waits on it). A closed-loop client waits for it like for the engine.

    Same interface as `ArrivalSource` (what `sim.engine.replica.Replica` reads); `source` may be an
    `ArrivalSource` or a cluster inbox. Requests keep their send order (one constant delay).

    `serial_s` (EngineConfig.front_request_ms / 1e3; 0 = none) is the part of that work done one request at a
    time before the scheduler sees the request: one process parses the HTTP request, validates it, applies the
    chat template, tokenizes the prompt and builds the engine request, then hands it on. vLLM V1: the API
    server process (vllm/entrypoints/openai/serving_chat.py / serving_completion.py -> AsyncLLM.add_request,
    whose input processor, vllm/v1/engine/processor.py (input_processor.py in later releases), tokenizes and
    builds the EngineCoreRequest before EngineCoreClient sends it to the engine-core process over ZMQ;
    `--api-server-count` runs several such processes because one saturates). SGLang: TokenizerManager
    (python/sglang/srt/managers/tokenizer_manager.py: `_tokenize_one_request`, then `send_to_scheduler` over
    ZMQ), one process. trtllm-serve (tensorrt_llm/serve/openai_server.py): one FastAPI process that tokenizes
    the prompt (LLM.generate_async's input processor) before submitting it to the executor. It is a FIFO
    server of capacity 1: a request sent at t starts when the server is free, max(t, busy), and leaves it
    serial_s later; then it takes the constant `delay_s` to the queue. A burst of C simultaneous sends
    therefore reaches the scheduler staggered, the k-th (from 1) k x serial_s + delay_s after its send, which
    a constant delay cannot produce (a closed loop's TTFT grows ~ C x serial_s / 2 at its median). Placed
    here, not on the host stage's first token (sim.engine.host `host_request_us`, charged on the output
    path after the prefill): the request's own work happens before the engine can schedule it, so it also
    spreads the burst's prefills over steps. The first-token/streaming part of the work stays in `delay_s`.
    FIFO through the serial server: the requests leave it in their send order.

    `jitter` (EngineConfig.front_jitter, 0..1; 0 = none, the constant delay above) spreads `delay_s` per request:
    request r's delay is delay_s x (1 + jitter x (2 u_r - 1)), u_r uniform on [0, 1) drawn from a hash of the
    request's id (`_unit`: the same request gets the same delay in every run, whatever the order), so the mean
    delay stays delay_s and jitter 1 spreads it over [0, 2 delay_s]. It models the variation of the per-request
    work outside the GPU steps (tokenization time varies with the text, HTTP and Python scheduling add noise) that
    desynchronises a closed loop of identical requests on a real server: with one constant delay, C requests
    finishing in the same step are sent, queued and prefilled together again (a cohort), and a change of the
    delay moves a whole cohort across a step boundary (docs/ttft-misses.md section 4). A delay may overtake
    another, so requests can reach the queue out of send order."""

    def __init__(self, source, delay_s: float, serial_s: float = 0.0, jitter: float = 0.0) -> None:
        if not 0.0 <= float(jitter) <= 1.0:
            raise ConfigError(f"front-end jitter must be within 0..1, got {jitter!r}")
        self.source = source
        self.delay_s = float(delay_s)
        # the serialized per-request work (capacity-1 server, docstring above); `_busy`: when it is next free
        self.serial_s = float(serial_s)
        self.jitter = float(jitter)
        self._busy = float("-inf")
        # a heap of (reaches the queue, send order, sent, request): the send order breaks ties, so with one constant
        # delay the requests leave in send order as a FIFO would
        self._held: list[tuple[float, int, float, Request]] = []
        self._seq = 0

    @classmethod
    def of_engine(cls, source, engine) -> FrontEnd:
        """The front end an engine preset (sim.catalog.engine_config.EngineConfig) puts before its queue: its
        request_overhead_ms delay, front_request_ms serial server and front_jitter."""
        return cls(source, engine.request_overhead_ms / 1e3, engine.front_request_ms / 1e3, engine.front_jitter)

    def _leaves(self, sent_s: float) -> float:
        """When a request sent at `sent_s` (after every earlier one) leaves the serial server: it starts when
        the server is free and takes serial_s; at once when there is no server (serial_s 0)."""
        return max(sent_s, self._busy) + self.serial_s if self.serial_s > 0 else sent_s

    def _reach(self, sent_s: float, request_id: str = "") -> float:
        """When a request sent at `sent_s` reaches the queue (the serial server, then its delay: the constant one,
        or with `jitter` its own), the server busy with it until it leaves."""
        self._busy = self._leaves(sent_s)
        if self.jitter > 0:
            return self._busy + self.delay_s * (1.0 + self.jitter * (2.0 * _unit(request_id) - 1.0))
        return self._busy + self.delay_s

    def reach_times(self, sends: Iterable[tuple[float, str]]) -> list[float]:
        """When each (send time, request id), taken in the order given (the send order), reaches the queue, on a
        front end that served nothing before: what `due` applies, for a diagnostic that reads a replica's log
        (benchmarks/ttft_breakdown.py). Leaves this front end as it was."""
        fresh = FrontEnd(None, self.delay_s, self.serial_s, self.jitter)
        return [fresh._reach(t, rid) for t, rid in sends]

    def _next_unsent_reach(self) -> float:
        """The earliest time the source's next send could reach the queue (without serving it)."""
        t = self.source.next_s
        # the earliest a delay can be: (1 - jitter) x delay_s (a lower bound; the send's own delay may be longer)
        return t if t == float("inf") else self._leaves(t) + self.delay_s * (1.0 - self.jitter)

    @property
    def next_s(self) -> float:
        own = self._held[0][0] if self._held else float("inf")
        return min(own, self._next_unsent_reach())

    def next_time(self) -> float | None:
        t = self.next_s
        return None if t == float("inf") else t

    def due(self, now_s: float) -> list[tuple[float, Request]]:
        """Requests that reach the queue by `now_s`, with their send times."""
        held = self._held
        for t, r in self.source.due(now_s):  # sent by now: held until it has passed the front end
            heapq.heappush(held, (self._reach(t, r.id), self._seq, t, r))
            self._seq += 1
        out = []
        while held and held[0][0] <= now_s:
            _, _, t, r = heapq.heappop(held)
            out.append((t, r))
        return out

    def done(self, request: Request, now_s: float) -> None:
        self.source.done(request, now_s)

    def rejected(self, request: Request, now_s: float) -> None:
        self.source.rejected(request, now_s)

    @property
    def exhausted(self) -> bool:
        return not self._held and self.source.exhausted

    def idle_wait(self, env, now_s: float):
        """The next request to reach the queue: the earliest held one, or the source's next send plus
        the delay; when the source knows no next send (a closed loop in flight, a cluster inbox) what
        it waits for."""
        if self._held:
            return env.timeout(max(self._held[0][0] - now_s, 0.0))
        if self.source.next_s == float("inf"):
            return self.source.idle_wait(env, now_s)
        return env.timeout(max(self._next_unsent_reach() - now_s, 0.0))


def _unit(request_id: str) -> float:
    """A number in [0, 1) fixed by the request id (the first 8 bytes of its BLAKE2b digest over 2**64): the same id
    gives the same number in every run and process (Python's hash() is salted per process), and distinct ids
    spread uniformly."""
    return int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big") / 2.0**64
