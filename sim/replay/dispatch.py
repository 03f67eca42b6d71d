"""When each request of a trace is sent: open loop (the trace's times) or N closed-loop clients.

Pure bookkeeping, no clock and no I/O, so the HTTP driver (asyncio) and the local driver (a
synchronous engine loop) release requests by the same rules as the simulator:

- Open loop: a request is ready at its `arrival_s`. A request with `think_s` whose session had an
  earlier request waits for that request to finish, then `think_s` more (the user read the answer
  and typed); it is ready at max(arrival_s, previous finish + think_s).
- Closed loop (`concurrency=N`): N clients; each sends the next request of the trace (in trace
  order) as soon as its previous one finishes. All N start at the first request's `arrival_s`.
  Arrival times and think times in the trace are ignored, as in `infersim run --concurrency`.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from workloads.request import Request


class Dispatcher:
    """Releases the requests of a trace; the driver calls `ready(now)` and `finished(id, now)`."""

    def __init__(self, requests: Sequence[Request], concurrency: int | None = None) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        self.start_s = ordered[0].arrival_s if ordered else 0.0
        self.concurrency = concurrency
        self._total = len(ordered)
        self._released = 0
        self._finished = 0
        self._in_flight: set[str] = set()
        if concurrency is not None:
            self._queue = deque(ordered)
            self._free_client_since_s = [self.start_s] * concurrency  # when each idle client became free
            return
        # open loop: a heap of (ready_s, order, request); a think-time request waits for its predecessor
        self._heap: list[tuple[float, int, Request]] = []
        self._waiting_on: dict[str, Request] = {}  # predecessor id -> the request that follows it
        last_of_session: dict[str, Request] = {}
        self._order = {r.id: i for i, r in enumerate(ordered)}
        for r in ordered:
            prev = last_of_session.get(r.session_id) if r.session_id is not None else None
            if prev is not None and r.think_s is not None:
                self._waiting_on[prev.id] = r
            else:
                heapq.heappush(self._heap, (r.arrival_s, self._order[r.id], r))
            if r.session_id is not None:
                last_of_session[r.session_id] = r

    @property
    def done(self) -> bool:
        """Every request was released and has finished (or failed)."""
        return self._finished == self._total

    @property
    def all_released(self) -> bool:
        return self._released == self._total

    def next_ready_s(self) -> float | None:
        """Earliest time a not-yet-released request becomes ready, if known now.

        None when the next release waits on a completion (closed loop with every client busy, or a
        session waiting for its previous answer) or when everything was released.
        """
        if self.concurrency is not None:
            return min(self._free_client_since_s) if self._queue and self._free_client_since_s else None
        return self._heap[0][0] if self._heap else None

    def ready(self, now_s: float) -> list[tuple[Request, float]]:
        """Requests to send now, each with the time it became ready (its arrival on the trace clock)."""
        out: list[tuple[Request, float]] = []
        if self.concurrency is not None:
            while self._queue and self._free_client_since_s:
                out.append((self._queue.popleft(), self._free_client_since_s.pop(0)))
        else:
            while self._heap and self._heap[0][0] <= now_s:
                ready_s, _, r = heapq.heappop(self._heap)
                out.append((r, ready_s))
        self._released += len(out)
        self._in_flight.update(r.id for r, _ in out)
        return out

    def finished(self, request_id: str, now_s: float) -> None:
        """A request ended (completed, rejected or failed) at `now_s`: free its client or session."""
        if request_id not in self._in_flight:
            raise KeyError(f"request {request_id!r} is not in flight")
        self._in_flight.remove(request_id)
        self._finished += 1
        if self.concurrency is not None:
            self._free_client_since_s.append(now_s)
            return
        follower = self._waiting_on.pop(request_id, None)
        if follower is not None:
            ready_s = max(follower.arrival_s, now_s + (follower.think_s or 0.0))
            heapq.heappush(self._heap, (ready_s, self._order[follower.id], follower))

    def abandon(self) -> list[Request]:
        """Stop releasing (the engine is gone or time is up): return every request never sent.

        They count as released and finished; requests in flight still need `finished`.
        """
        if self.concurrency is not None:
            rest = list(self._queue)
            self._queue.clear()
        else:  # every unsent request is either in the heap or waiting behind a predecessor
            rest = [r for _, _, r in self._heap] + list(self._waiting_on.values())
            rest.sort(key=lambda r: self._order[r.id])
            self._heap.clear()
            self._waiting_on.clear()
        self._released += len(rest)
        self._finished += len(rest)
        return rest
