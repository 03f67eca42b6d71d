"""When each request of a trace is sent: by exactly the simulator's rules.

The release rules live in one place, `workloads.arrivals.ArrivalSource` (open loop at `arrival_s`;
sessions whose `think_s` requests wait for every earlier request of the session, then `think_s`;
closed loop of N clients starting at time 0, each sending the trace's next request when its
previous one is done, plus that request's `think_s`). A real replay must send requests at the times
the simulation assumes, so it drives the same object; `Dispatcher` adds what a driver needs on top:
which requests are in flight, when the whole trace is done, and giving up on the rest when the
engine is gone or time is up.
"""

from __future__ import annotations

from collections.abc import Sequence

from workloads.arrivals import ArrivalSource
from workloads.request import Request


class Dispatcher:
    """Releases the requests of a trace; the driver calls `ready(now)` and `finished(id, now)`.

    Times are on the trace's clock: open loop starts at the first request's `arrival_s`, closed loop
    at 0 (as the simulator's).
    """

    def __init__(self, requests: Sequence[Request], concurrency: int | None = None) -> None:
        ordered = sorted(requests, key=lambda r: r.arrival_s)  # stable: trace order among equal arrivals
        self._source = ArrivalSource(ordered, concurrency)
        self.concurrency = concurrency
        self.start_s = 0.0 if concurrency or not ordered else ordered[0].arrival_s
        self._all = ordered
        self._released: set[str] = set()
        self._in_flight: dict[str, Request] = {}
        self._finished = 0
        self._abandoned = False

    @property
    def done(self) -> bool:
        """Every request was released (or abandoned) and has finished."""
        return self._finished == len(self._all)

    def next_ready_s(self) -> float | None:
        """Earliest time another request may become ready, if known now (None: waiting on completions)."""
        return None if self._abandoned else self._source.next_time()

    def ready(self, now_s: float) -> list[tuple[Request, float]]:
        """Requests to send now, each with the time it became ready (its arrival on the trace clock)."""
        if self._abandoned:
            return []
        out = [(r, t) for t, r in self._source.due(now_s)]
        for r, _ in out:
            self._released.add(r.id)
            self._in_flight[r.id] = r
        return out

    def finished(self, request_id: str, now_s: float) -> None:
        """A request ended (completed, rejected or failed) at `now_s`: free its client or session."""
        r = self._in_flight.pop(request_id, None)
        if r is None:
            raise KeyError(f"request {request_id!r} is not in flight")
        self._finished += 1
        if not self._abandoned:
            self._source.done(r, now_s)

    def abandon(self) -> list[Request]:
        """Stop releasing (engine gone, time up): return every request never sent, in trace order.

        They count as finished; requests in flight still need `finished`.
        """
        self._abandoned = True
        rest = [r for r in self._all if r.id not in self._released]
        self._released.update(r.id for r in rest)
        self._finished += len(rest)
        return rest
