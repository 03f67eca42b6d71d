"""Several replicas of one engine deployment behind a router, in one SimPy environment.

The trace's `ArrivalSource` (open loop, sessions, closed loop) is shared; each replica reads its
own `Inbox`, which looks to it like a source. Each request is routed at its arrival time with the
replicas' state at that time (`Dispatcher.pull`, called by the dispatcher's process and by any
replica reading its inbox at that time; SimPy runs events of equal time in a fixed order, so runs
are deterministic).

Timing rules:
- The dispatcher is a SimPy process of its own that wakes at every arrival time (and when a
  completion lets a closed-loop client or a session send its next request), so a request is
  routed at its arrival even when every replica is mid-iteration.
- An idle replica sleeps until a request is routed to it.
- A busy replica bounds a fast-forwarded decode run by the next arrival anywhere (a lower bound
  of its own next arrival). Limitation: a request *released* mid-run by a completion on another
  replica (closed loop, `think_s` sessions) is routed at once, but a replica in a fast-forwarded
  decode run admits it at the end of that run (at most its first completion); trace arrival
  times are not affected.

Per-replica results are each replica's own summary (`summary["replicas"]`); the aggregate
summary pools every request and inter-token gap (latency percentiles over all requests),
throughput over the first arrival to the last completion, KV capacity summed, KV peaks = sum of
the replicas' peaks (an upper bound of the simultaneous peak), batch size over all iterations.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np
import pandas as pd
import simpy

from sim.cluster.router import make_router
from sim.engine.metrics import GapLog, RequestLog, summarize
from sim.engine.replica import Replica
from workloads.arrivals import ArrivalSource
from sim.errors import ConfigError
from workloads.request import Request


class Inbox:
    """One replica's view of the shared source: requests routed to it, plus the global next
    arrival time as a lower bound of its own. Also what the router reads of the replica."""

    def __init__(self, dispatcher: "Dispatcher", index: int) -> None:
        self.d = dispatcher
        self.index = index
        self.queue: deque[tuple[float, Request]] = deque()
        self.outstanding = 0
        self.replica: Replica | None = None
        self.wake: simpy.Event | None = None  # set while the replica sleeps

    # ---- what the router reads ----------------------------------------------------------------
    @property
    def queued_tokens(self) -> int:
        """prompt + max_tokens (the client's budget) of its requests routed and not yet admitted."""
        waiting = self.replica.state.waiting
        return (sum(r.prompt_tokens + r.max_tokens for _, r in self.queue)
                + sum(p.prompt_tokens + p.max_tokens for p in waiting))

    def kv_free_tokens(self) -> int:
        kv = self.replica.kv
        return kv.free_blocks * kv.block_size

    # ---- the source interface the replica uses ----------------------------------------------------
    @property
    def next_s(self) -> float:
        own = self.queue[0][0] if self.queue else float("inf")
        return min(own, self.d.source.next_s)

    def next_time(self) -> float | None:
        t = self.next_s
        return None if t == float("inf") else t

    def due(self, now_s: float) -> list[tuple[float, Request]]:
        self.d.pull(now_s)
        out = []
        q = self.queue
        while q and q[0][0] <= now_s:
            out.append(q.popleft())
        return out

    def done(self, request: Request, now_s: float) -> None:
        self.outstanding -= 1
        self.d.finished(request, now_s)

    def rejected(self, request: Request, now_s: float) -> None:
        self.done(request, now_s)

    def idle_wait(self, env: simpy.Environment, now_s: float):
        """Sleep until a request routed here is due, or a kick (a request routed here, or the run
        is over); None when the whole run is over."""
        if self.queue:
            return env.timeout(max(self.queue[0][0] - now_s, 0.0))
        if self.d.all_done():
            return None
        self.wake = env.event()
        return self.wake

    def kick(self) -> None:
        w = self.wake
        if w is not None and not w.triggered:
            w.succeed()
        self.wake = None


class Dispatcher:
    """Routes the shared source's arrivals to the inboxes."""

    inbox_type = Inbox

    def __init__(self, source: ArrivalSource, router, n: int) -> None:
        self.source = source
        self.router = router
        self.inboxes = [self.inbox_type(self, i) for i in range(n)]
        self.routed = np.zeros(n, dtype=np.int64)
        self.router_wake: simpy.Event | None = None
        self.in_flight = 0  # requests taken from the source and not finally done
        self.also_kick: list[Inbox] = []  # other pools' inboxes to wake when the run is over

    def pull(self, now_s: float) -> None:
        if self.source.next_s > now_s:
            return
        for t, r in self.source.due(now_s):
            self.in_flight += 1
            self.route(t, self.admit_form(r))

    def admit_form(self, r: Request) -> Request:
        """The request as this pool serves it (itself; a prefill pool serves its first token only)."""
        return r

    def route(self, t: float, r: Request) -> None:
        i = self.router.choose(r, self.inboxes)
        box = self.inboxes[i]
        box.queue.append((t, r))
        box.outstanding += 1
        self.routed[i] += 1
        box.kick()

    def finished(self, request: Request, now_s: float) -> None:
        self.in_flight -= 1
        self.source.done(request, now_s)  # a closed-loop client or a session may send its next one
        self._kick_router()
        if self.all_done():
            self.kick_all()

    def _kick_router(self) -> None:
        w = self.router_wake
        if w is not None and not w.triggered:
            w.succeed()

    def run(self, env: simpy.Environment):
        """The router's process: route every arrival at its arrival time, even when every replica
        is in the middle of an iteration."""
        while True:
            t = self.source.next_time()
            if t is None and self.all_done():
                return
            self.router_wake = env.event()
            if t is None:
                yield self.router_wake
            else:
                yield env.any_of([self.router_wake, env.timeout(max(t - env.now, 0.0))])
            self.router_wake = None
            self.pull(env.now)

    def kick_all(self) -> None:
        for box in (*self.inboxes, *self.also_kick):
            box.kick()

    def all_done(self) -> bool:
        return self.source.exhausted and not self.in_flight


def merge_logs(logs: list[RequestLog]) -> tuple[RequestLog, np.ndarray]:
    """One RequestLog of every replica's rows, in arrival order (stable), and each row's replica."""
    merged = RequestLog()
    n = sum(log.n for log in logs)
    replica = np.concatenate([np.full(log.n, i, dtype=np.int64) for i, log in enumerate(logs)]) if n else \
        np.zeros(0, dtype=np.int64)
    arrival = np.concatenate([log.arrival_s[: log.n] for log in logs]) if n else np.zeros(0)
    order = np.argsort(arrival, kind="stable")
    merged.resize(n)  # grow the columns to n rows, then overwrite them
    for name in ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
                 "preemptions", "status"):
        col = np.concatenate([getattr(log, name)[: log.n] for log in logs]) if n else None
        if n:
            getattr(merged, name)[:n] = col[order]
    if n:
        codes = np.concatenate([np.array([merged.reason_code(log.reasons[c]) for c in log.reason[: log.n]],
                                         dtype=np.int64) for log in logs])
        merged.reason[:n] = codes[order]
    ids = [rid for log in logs for rid in log.ids]
    merged.ids = [ids[i] for i in order]
    merged.n = n
    return merged, replica[order]


def merge_gaps(gaps: list[GapLog]) -> GapLog:
    out = GapLog()
    for g in gaps:
        out.first.extend(g.first)
        out.delta.extend(g.delta)
        out.steps.extend(g.steps)
        out.weight.extend(g.weight)
    return out


def simulate_cluster(requests: Iterable[Request], *, hw, model, quant, engine, replicas: int, router: str,
                     concurrency=None, seed=0, record_iterations=True, cost_params=None, fast_forward=True,
                     check_invariants=False, config_extra=None):
    """`replicas` copies of one deployment behind `router`; a `SimResult` whose summary is the
    aggregate, plus `summary["replicas"]` (one summary per replica, without its config) and
    `summary["config"]["replicas"/"router"]`; requests.csv gains a `replica` column."""
    from sim.engine.build import SimResult, build_replica, check_drained, replica_parts, replica_summary

    if replicas < 1:
        raise ConfigError(f"must be >= 1, got {replicas}", field="--replicas")
    parts = replica_parts(hw, model, quant, engine, cost_params)
    policy = make_router(router, replicas)
    env = simpy.Environment()
    dispatcher = Dispatcher(ArrivalSource(requests, concurrency), policy, replicas)
    reps = []
    for box in dispatcher.inboxes:
        rep = build_replica(env, parts, box, record_iterations=record_iterations, fast_forward=fast_forward,
                            check_invariants=check_invariants)
        box.replica = rep
        reps.append(rep)
        env.process(rep.run())
    env.process(dispatcher.run(env))
    env.run()
    if check_invariants:
        for rep in reps:
            check_drained(rep)
        if not dispatcher.all_done():
            raise AssertionError("requests left undelivered at the end of the run")
    config = {**parts.config(concurrency=concurrency, seed=seed, config_extra=config_extra),
              "replicas": replicas, "router": policy.name}
    per = []
    for i, rep in enumerate(reps):
        s = replica_summary(config, rep)
        del s["config"]
        per.append({"replica": i, "routed": int(dispatcher.routed[i]), **s})
    log, which = merge_logs([rep.log for rep in reps])
    summary = summarize(
        config, log, merge_gaps([rep.gaps for rep in reps]),
        **pooled_totals(reps),
    )
    summary["prefix_cache"] = _pooled_prefix([p["prefix_cache"] for p in per])
    summary["replicas"] = per
    frame = log.frame()
    frame["replica"] = which
    return SimResult(summary, frame, merged_iterations(reps),
                     extra={"kv_plan": parts.kvp, "final_clock_s": env.now,
                            "events": sum(len(rep.iterations.start_s) for rep in reps)})


def pooled_totals(reps) -> dict:
    """KV and batch figures of several replicas added up, as `summarize` takes them (peaks are
    summed per replica: an upper bound of the simultaneous peak)."""
    return dict(
        kv_capacity_tokens=sum(rep.kv.capacity_tokens for rep in reps),
        peak_used_tokens=sum(rep.peak_used_tokens for rep in reps),
        peak_reserved_tokens=sum(rep.peak_reserved_tokens for rep in reps),
        preemptions=sum(rep.state.preemptions for rep in reps),
        batch_steps=sum(rep.batch_steps for rep in reps),
        batch_seq_steps=sum(rep.batch_seq_steps for rep in reps),
        batch_max=max(rep.batch_max for rep in reps),
    )


def merged_iterations(reps) -> pd.DataFrame:
    """Every replica's iteration log in one table, a `replica` column first, ordered by start time."""
    iters = []
    for i, rep in enumerate(reps):
        f = rep.iterations.frame()
        f.insert(0, "replica", i)
        iters.append(f)
    return pd.concat(iters, ignore_index=True).sort_values(["start_s", "replica"], kind="stable").reset_index(drop=True)


def _pooled_prefix(blocks: list[dict]) -> dict:
    """The replicas' prefix-cache figures added up (hit rate over all lookups)."""
    if not blocks[0].get("enabled"):
        return {"enabled": False}
    out = dict(blocks[0])
    for k in ("hit_tokens", "queried_tokens", "lookups", "hit_lookups", "evicted_blocks", "cached_blocks_at_end"):
        if k in out:
            out[k] = sum(b[k] for b in blocks)
    out["hit_rate"] = out["hit_tokens"] / out["queried_tokens"] if out["queried_tokens"] else 0.0
    return out
