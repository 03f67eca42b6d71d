"""When the requests of a trace reach the server: open loop, sessions, closed loop (`ArrivalSource`).

The release rules of a workload, shared by the simulator (`sim.engine.replica`, `sim.cluster`) and the
replay against a real server (`calibrate.replay.dispatch`), so both send the same request at the
same moment. It lives with the workloads (the layer below the catalog and the engine) because it
is a property of the traffic, not of any engine.
"""

from __future__ import annotations

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
    `ArrivalSource` or a cluster inbox. Requests keep their send order (one constant delay)."""

    def __init__(self, source, delay_s: float) -> None:
        self.source = source
        self.delay_s = float(delay_s)
        self._held: deque[tuple[float, float, Request]] = deque()  # (reaches the queue, sent, request)

    @property
    def next_s(self) -> float:
        own = self._held[0][0] if self._held else float("inf")
        return min(own, self.source.next_s + self.delay_s)

    def next_time(self) -> float | None:
        t = self.next_s
        return None if t == float("inf") else t

    def due(self, now_s: float) -> list[tuple[float, Request]]:
        """Requests that reach the queue by `now_s`, with their send times."""
        d = self.delay_s
        for t, r in self.source.due(now_s):  # sent by now: held until t + d
            self._held.append((t + d, t, r))
        out = []
        held = self._held
        while held and held[0][0] <= now_s:
            _, t, r = held.popleft()
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
        return env.timeout(max(self.source.next_s + self.delay_s - now_s, 0.0))
