"""The release rules of a replay (open loop, closed loop, sessions with think time) as invariants."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.replay.dispatch import Dispatcher
from workloads.request import Request


def _requests(arrivals, sessions=None, think=None):
    out = []
    for i, a in enumerate(sorted(arrivals)):
        sid = None if sessions is None else f"s{sessions[i % len(sessions)]}"
        out.append(Request(id=f"r{i}", arrival_s=a, prompt_tokens=10, output_tokens=5, max_tokens=5,
                           session_id=sid, think_s=think if sid is not None else None))
    return out


def _run(dispatcher: Dispatcher, service_s: dict[str, float]):
    """Drive a dispatcher with a fake engine: each request takes service_s[id] after release.

    Returns [(id, ready_s, release_now_s, finish_s)] and the peak number in flight.
    """
    now = dispatcher.start_s
    finishing: list[tuple[float, str]] = []
    log = []
    peak = 0
    while not dispatcher.done:
        for req, ready_s in dispatcher.ready(now):
            fin = now + service_s[req.id]
            heapq.heappush(finishing, (fin, req.id))
            log.append((req.id, ready_s, now, fin))
        peak = max(peak, len(finishing))
        nxt = dispatcher.next_ready_s()
        candidates = [t for t in (nxt, finishing[0][0] if finishing else None) if t is not None]
        assert candidates, "dispatcher stalled"
        now = max(now, min(candidates))
        while finishing and finishing[0][0] <= now:
            fin, rid = heapq.heappop(finishing)
            dispatcher.finished(rid, fin)
    return log, peak


arrivals = st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=40)
services = st.lists(st.floats(0.001, 10, allow_nan=False), min_size=1, max_size=40)


@settings(deadline=None, max_examples=60)
@given(arrivals, services)
def test_open_loop_releases_every_request_once_never_before_its_arrival(arr, svc):
    reqs = _requests(arr)
    log, _ = _run(Dispatcher(reqs), {r.id: svc[i % len(svc)] for i, r in enumerate(reqs)})
    assert sorted(x[0] for x in log) == sorted(r.id for r in reqs)
    by_id = {r.id: r for r in reqs}
    for rid, ready_s, sent_s, _ in log:
        assert ready_s == by_id[rid].arrival_s
        assert sent_s >= ready_s


@settings(deadline=None, max_examples=60)
@given(arrivals, services, st.integers(1, 6))
def test_closed_loop_keeps_at_most_n_in_flight_and_sends_in_trace_order(arr, svc, n):
    reqs = _requests(arr)
    log, peak = _run(Dispatcher(reqs, concurrency=n), {r.id: svc[i % len(svc)] for i, r in enumerate(reqs)})
    assert peak <= n
    assert [x[0] for x in log] == [r.id for r in reqs]
    # the first min(n, len) clients all start at time 0 (the simulator's closed loop); the rest when one frees up
    assert all(x[1] == 0.0 for x in log[: min(n, len(reqs))])


@settings(deadline=None, max_examples=40)
@given(arrivals, services, st.floats(0, 5, allow_nan=False))
def test_session_request_waits_for_every_earlier_answer_plus_think_time(arr, svc, think):
    reqs = _requests(arr, sessions=[0, 1], think=think)
    service = {r.id: svc[i % len(svc)] for i, r in enumerate(reqs)}
    log, _ = _run(Dispatcher(reqs), service)
    finish = {rid: fin for rid, _, _, fin in log}
    ready = {rid: ready_s for rid, ready_s, _, _ in log}
    earlier: dict[str, list[str]] = {}
    for r in reqs:
        for prev in earlier.get(r.session_id, []):
            assert ready[r.id] >= finish[prev] + think - 1e-9
        assert ready[r.id] >= r.arrival_s
        earlier.setdefault(r.session_id, []).append(r.id)


def test_abandon_returns_every_request_never_sent_and_ends_the_run():
    reqs = _requests([0, 1, 2, 3, 4])
    d = Dispatcher(reqs, concurrency=2)
    sent = d.ready(0.0)
    assert [r.id for r, _ in sent] == ["r0", "r1"]
    rest = d.abandon()
    assert [r.id for r in rest] == ["r2", "r3", "r4"]
    assert d.next_ready_s() is None
    assert not d.done  # two still in flight
    d.finished("r0", 1.0)
    d.finished("r1", 1.0)
    assert d.done and d.ready(5.0) == []
