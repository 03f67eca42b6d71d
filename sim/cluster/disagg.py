"""Disaggregated prefill and decode (Splitwise, ISCA 2024; DistServe, OSDI 2024; NVIDIA Dynamo):
a prefill pool computes each prompt and its first token, the prompt's KV cache is sent to a
decode pool, which generates the rest.

    arrival -> prefill pool (router) -> first token          TTFT ends here
            -> KV transfer: prompt_tokens x kv_bytes_per_token / bandwidth + latency
            -> decode pool (router) -> tokens 2..n -> done

- Each pool is `sim.cluster`'s machinery: replicas of the engine on the pool's hardware profile
  (own cost model and KV plan), a dispatcher process and a router (`least-outstanding` for the
  prefill pool, the run's `--router` for the decode pool).
- The prefill pool serves each request as a one-token request (prompt + 1 token of KV, its
  prefix cache applies); the KV leaves with the request.
- Transfer: bandwidth = the smaller of the two profiles' `interconnect_bandwidth_gb_per_s` (the
  slower end limits a point-to-point copy; both are per-direction figures), latency = the larger
  of their `interconnect_latency_us`. A profile without an interconnect figure is an error. Links
  are not shared between concurrent transfers (each pair of devices has its own; NVLink/NVSwitch
  behaves so, a shared PCIe switch would not).
- The decode pool admits the request with its prompt's KV already present (no prompt compute)
  and the first token already streamed: its first iteration computes the first token's KV and
  emits token 2. Its KV reservation is prompt + max_tokens as usual.
- Invariant (checked with `check_invariants` and by the tests): every decode admission happens
  after its KV transfer completed; each pool's KV is conserved; every request is completed or
  rejected exactly once.

The merged requests table: arrival, scheduled (prefill admission) and first token from the
prefill pool, finish and output tokens from the decode pool, preemptions summed, plus
`kv_transfer_s` and `decode_scheduled_s`; the ITL pool includes each request's token 1 -> 2
gap (transfer and decode queueing included).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim.catalog.hardware import HardwareProfile
from sim.cluster.replicas import (
    Dispatcher,
    Inbox,
    _pooled_prefix,
    merge_gaps,
    merge_logs,
    merged_iterations,
    pooled_totals,
)
from sim.cluster.router import make_router
from sim.engine.metrics import STATUS_COMPLETED, STATUS_REJECTED, summarize
from workloads.arrivals import ArrivalSource
from sim.errors import ConfigError
from workloads.request import Request


@dataclass(frozen=True)
class PoolSpec:
    hw: str
    replicas: int


def parse_disagg(text: str) -> tuple[PoolSpec, PoolSpec]:
    """`PREFILL_HW:N,DECODE_HW:M` (e.g. `h100-sxm:1,h100-sxm:3`) -> the two pools."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 2:
        raise ConfigError(f"expected PREFILL_HW:N,DECODE_HW:M, got '{text}'", field="--disagg")
    pools = []
    for p in parts:
        hw, sep, n = p.rpartition(":")
        if not sep or not hw or not n.isdigit() or int(n) < 1:
            raise ConfigError(f"expected HW:N with N >= 1, got '{p}'", field="--disagg")
        pools.append(PoolSpec(hw, int(n)))
    return pools[0], pools[1]


def transfer_link(a: HardwareProfile, b: HardwareProfile) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of a KV copy from a to b: min bandwidth, max latency."""
    for p in (a, b):
        if p.interconnect_bandwidth_gb_per_s is None:
            raise ConfigError(f"profile {p.name} has no interconnect_bandwidth_gb_per_s to send KV over",
                              field="--disagg")
    return (min(a.interconnect_bandwidth_gb_per_s, b.interconnect_bandwidth_gb_per_s) * 1e9,
            max(a.interconnect_latency_us, b.interconnect_latency_us) * 1e-6)


class PrefillInbox(Inbox):
    def done(self, request: Request, now_s: float) -> None:
        self.outstanding -= 1
        self.d.prefilled(request, now_s)

    def rejected(self, request: Request, now_s: float) -> None:
        self.outstanding -= 1
        self.d.finished(self.d.originals.pop(id(request)), now_s)


class PrefillDispatcher(Dispatcher):
    inbox_type = PrefillInbox

    def __init__(self, source, router, n, *, env, decode_source: "HandoffSource", kv_bytes_per_token: float,
                 bandwidth_bytes_per_s: float, latency_s: float) -> None:
        super().__init__(source, router, n)
        self.env = env
        self.originals: dict[int, Request] = {}  # id(one-token form) -> the trace's request
        self.decode_source = decode_source
        self.kv_bytes_per_token = kv_bytes_per_token
        self.bandwidth = bandwidth_bytes_per_s
        self.latency_s = latency_s
        self.transfers: list[tuple[str, float, float]] = []  # (id, start s, end s)

    def admit_form(self, r: Request) -> Request:
        one = replace(r, output_tokens=1, max_tokens=1)
        self.originals[id(one)] = r
        return one

    def transfer_s(self, prompt_tokens: int) -> float:
        """Seconds to copy a prompt's KV: tokens x KV bytes per token / bandwidth + latency."""
        return prompt_tokens * self.kv_bytes_per_token / self.bandwidth + self.latency_s

    def prefilled(self, one: Request, now_s: float) -> None:
        r = self.originals.pop(id(one))
        if min(r.output_tokens, r.max_tokens) <= 1:  # the first token was the last: nothing to decode
            self.decode_source.single_token.add(r.id)
            self.finished(r, now_s)
            return
        self.decode_source.in_transfer += 1
        self.env.process(self._transfer(r, now_s))

    def _transfer(self, r: Request, first_token_s: float):
        yield self.env.timeout(self.transfer_s(r.prompt_tokens))
        end = self.env.now
        self.transfers.append((r.id, first_token_s, end))
        self.decode_source.arrive(end, r, first_token_s)


class HandoffSource:
    """The decode pool's arrivals: requests whose KV transfer has completed."""

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0
        self.in_transfer = 0
        self.handoff: dict = {}  # request id -> (first token s, prompt tokens of KV present)
        self.single_token: set = set()
        self.upstream: PrefillDispatcher | None = None
        self.dispatcher: Dispatcher | None = None

    def arrive(self, t: float, r: Request, first_token_s: float) -> None:
        self.in_transfer -= 1
        self.handoff[r.id] = (first_token_s, r.prompt_tokens)
        heapq.heappush(self.heap, (t, self.seq, r))
        self.seq += 1
        self.dispatcher._kick_router()

    @property
    def next_s(self) -> float:
        return self.heap[0][0] if self.heap else float("inf")

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def due(self, now_s: float):
        out = []
        while self.heap and self.heap[0][0] <= now_s:
            t, _, r = heapq.heappop(self.heap)
            out.append((t, r))
        return out

    def done(self, request: Request, now_s: float) -> None:
        self.upstream.finished(request, now_s)  # the whole request is done: sessions may go on

    @property
    def exhausted(self) -> bool:
        return not self.heap and not self.in_transfer and self.upstream.all_done()


class DecodeDispatcher(Dispatcher):
    def all_done(self) -> bool:
        return self.source.exhausted and not self.in_flight

    def finished(self, request: Request, now_s: float) -> None:
        self.in_flight -= 1
        self.source.done(request, now_s)
        self._kick_router()
        if self.all_done():
            self.kick_all()


def simulate_disagg(requests: Iterable[Request], *, prefill_hw: HardwareProfile, decode_hw: HardwareProfile,
                    prefill_replicas: int, decode_replicas: int, model, quant, engine_for, router: str,
                    concurrency=None, seed=0, record_iterations=True, fast_forward=True, check_invariants=False,
                    config_extra=None):
    """Simulate a prefill pool and a decode pool (see the module docstring). `engine_for(hw)`
    gives the engine configuration resolved for a pool's hardware."""
    from sim.engine.build import SimResult, build_replica, check_drained, replica_parts, replica_summary

    pre_parts = replica_parts(prefill_hw, model, quant, engine_for(prefill_hw))
    dec_parts = replica_parts(decode_hw, model, quant, engine_for(decode_hw))
    bandwidth, latency = transfer_link(prefill_hw, decode_hw)
    env = simpy.Environment()
    handoff = HandoffSource()
    pre = PrefillDispatcher(ArrivalSource(requests, concurrency), make_router("least-outstanding", prefill_replicas),
                            prefill_replicas, env=env, decode_source=handoff,
                            kv_bytes_per_token=pre_parts.kvp.kv_bytes_per_token, bandwidth_bytes_per_s=bandwidth,
                            latency_s=latency)
    dec = DecodeDispatcher(handoff, make_router(router, decode_replicas), decode_replicas)
    handoff.upstream, handoff.dispatcher = pre, dec
    pre.also_kick = dec.inboxes
    dec.also_kick = pre.inboxes
    pools = []
    for parts, disp in ((pre_parts, pre), (dec_parts, dec)):
        reps = []
        for box in disp.inboxes:
            rep = build_replica(env, parts, box, record_iterations=record_iterations, fast_forward=fast_forward,
                                check_invariants=check_invariants, front_end=disp is pre)
            if disp is dec:
                rep.handoff = handoff.handoff
            box.replica = rep
            reps.append(rep)
            env.process(rep.run())
        env.process(disp.run(env))
        pools.append(reps)
    env.run()
    pre_reps, dec_reps = pools
    if check_invariants:
        for rep in pre_reps + dec_reps:
            check_drained(rep)
        if not pre.all_done() or handoff.handoff:
            raise AssertionError("requests left in flight at the end of the run")

    log, transfer_s, decode_sched = _merge(pre, pre_reps, dec_reps)
    if check_invariants:
        ok = ~np.isnan(decode_sched)
        if (decode_sched[ok] < transfer_s[1][ok] - 1e-12).any():
            raise AssertionError("a decode started before its KV transfer completed")
    link = {"kv_transfer_bandwidth_bytes_per_s": bandwidth, "kv_transfer_latency_s": latency}
    config = {**dec_parts.config(concurrency=concurrency, seed=seed, config_extra=config_extra),
              "disagg": {"prefill": {"hw": prefill_hw.name, "replicas": prefill_replicas,
                                     "kv_capacity_tokens": pre_parts.kvp.capacity_tokens},
                         "decode": {"hw": decode_hw.name, "replicas": decode_replicas,
                                    "kv_capacity_tokens": dec_parts.kvp.capacity_tokens},
                         "router": dec.router.name, **link}}
    per = []
    for pool, reps, disp in (("prefill", pre_reps, pre), ("decode", dec_reps, dec)):
        for i, rep in enumerate(reps):
            s = replica_summary(config, rep)
            del s["config"]
            per.append({"replica": len(per), "pool": pool, "routed": int(disp.routed[i]), **s})
    everyone = pre_reps + dec_reps
    summary = summarize(
        config, log, merge_gaps([rep.gaps for rep in dec_reps]),
        **pooled_totals(everyone),
    )
    summary["prefix_cache"] = _pooled_prefix([p["prefix_cache"] for p in per if p["pool"] == "prefill"])
    summary["replicas"] = per
    durations = transfer_s[1] - transfer_s[0]
    durations = durations[~np.isnan(durations)]
    summary["kv_transfer"] = {
        "transfers": int(len(durations)),
        "mean_s": float(durations.mean()) if len(durations) else None,
        "max_s": float(durations.max()) if len(durations) else None,
    }
    frame = log.frame()
    frame["kv_transfer_s"] = transfer_s[1] - transfer_s[0]
    frame["decode_scheduled_s"] = decode_sched
    return SimResult(summary, frame, merged_iterations(everyone),
                     extra={"final_clock_s": env.now, "events": sum(len(r.iterations.start_s) for r in everyone)})


def _merge(pre: PrefillDispatcher, pre_reps, dec_reps):
    """The per-request table: prefill rows (arrival order) completed by their decode rows."""
    plog, _ = merge_logs([rep.log for rep in pre_reps])
    dlog, _ = merge_logs([rep.log for rep in dec_reps])
    n = plog.n
    drow = {rid: i for i, rid in enumerate(dlog.ids)}
    transfers = {rid: (a, b) for rid, a, b in pre.transfers}
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    dsched = np.full(n, np.nan)
    for i, rid in enumerate(plog.ids):
        if plog.status[i] != STATUS_COMPLETED:
            continue
        j = drow.get(rid)
        if j is None:  # a one-token request: done at its prefill
            continue
        start[i], end[i] = transfers[rid]
        dsched[i] = dlog.scheduled_s[j]
        plog.finish_s[i] = dlog.finish_s[j]
        plog.output_tokens[i] = dlog.output_tokens[j]
        plog.preemptions[i] += dlog.preemptions[j]
        plog.status[i] = dlog.status[j]
        if dlog.status[j] == STATUS_REJECTED:
            plog.reason[i] = plog.reason_code("decode pool: " + dlog.reasons[dlog.reason[j]])
            plog.finish_s[i] = np.nan
        elif dlog.reason[j]:
            plog.reason[i] = plog.reason_code(dlog.reasons[dlog.reason[j]])
    return plog, (start, end), dsched
