"""Calibrate against a running server: timed streaming requests instead of llama.cpp probes.

Raw llama.cpp probes cannot see what a serving engine adds per iteration and per sequence
(HTTP streaming, detokenization, its scheduler, its sampling), so this path measures the server
users will talk to and turns what it saw into the same probe points the fit uses:

1. single stream, one request at a time, at several prompt lengths:
   time to first token -> a prefill point (P prompt tokens, empty cache; it includes the HTTP
   round trip and the first sampling, which is what a user waits for);
   the inter-token intervals -> a decode point (batch 1, at the request's mean context);
2. 1, 2, 4, 8 concurrent streams released together (closed loop, one request per client):
   every inter-token interval of every stream is labelled with the number of streams that were
   decoding at its midpoint (between their first and last token); intervals in which another
   stream received its first token are left out (that iteration also ran a prefill). The median
   interval of each label k is a decode point with batch k. A server that batches (llama-server,
   vLLM) yields points at k = 1 … N; one that serves requests one after another
   (llama-cpp-python's server) yields k = 1 only, and the fit sees that.

Requests go through the replay driver (`calibrate.replay.http`): prompts of exact token counts through
the server's tokenizer endpoint, unique prefixes (no prompt-cache hits), forced output lengths.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from calibrate.fit import Observation
from workloads.request import Request

MIN_INTERVALS = 5  # a batch-size label needs this many inter-token intervals to become a point


@dataclass(frozen=True)
class EndpointPlan:
    prompt_lengths: tuple[int, ...]
    single_repeats: int
    single_output_tokens: int
    concurrency: tuple[int, ...]
    concurrent_prompt_tokens: int
    concurrent_output_tokens: int


def endpoint_plan(*, quick: bool, max_context: int) -> EndpointPlan:
    """Prompt lengths within the served model's context (leaving room for the outputs)."""
    out_single = 16 if quick else 32
    lengths = (32, 128, 512, 1024) if quick else (32, 128, 256, 512, 1024, 2048)
    lengths = tuple(p for p in lengths if p + out_single + 8 <= max_context)
    return EndpointPlan(
        prompt_lengths=lengths,
        single_repeats=2 if quick else 3,
        single_output_tokens=out_single,
        concurrency=(1, 2, 4, 8),
        concurrent_prompt_tokens=min(64, max(8, max_context // 4)),
        concurrent_output_tokens=24 if quick else 48,
    )


def single_stream_requests(plan: EndpointPlan) -> list[Request]:
    reqs = []
    for r in range(plan.single_repeats):
        for p in plan.prompt_lengths:
            n = plan.single_output_tokens
            reqs.append(Request(id=f"single-{p}-{r}", arrival_s=0.0, prompt_tokens=p, output_tokens=n, max_tokens=n))
    return reqs


def concurrent_requests(plan: EndpointPlan, n: int) -> list[Request]:
    p, o = plan.concurrent_prompt_tokens, plan.concurrent_output_tokens
    return [Request(id=f"conc{n}-{i}", arrival_s=0.0, prompt_tokens=p, output_tokens=o, max_tokens=o) for i in range(n)]


def _completed(records) -> list:
    return [r for r in records if r.status == "completed" and len(r.token_times_s) >= 2]


def single_stream_observations(records) -> list[Observation]:
    """Prefill points from TTFT and decode points from the median inter-token interval, per request
    prompt length (the median over that length's repeats)."""
    by_len: dict[int, list] = {}
    for r in _completed(records):
        by_len.setdefault(r.prompt_tokens, []).append(r)
    out = []
    for p, rs in sorted(by_len.items()):
        ttfts = [r.ttft_s for r in rs if r.ttft_s and r.ttft_s > 0]
        if ttfts:
            out.append(Observation(f"endpoint-prefill-{p}", "prefill", p, 0, 0, 0.0, statistics.median(ttfts)))
        itls, ctxs = [], []
        for r in rs:
            t = r.token_times_s
            for k in range(1, len(t)):
                itls.append(t[k] - t[k - 1])
                ctxs.append(p + k)
        itls_pos = [x for x in itls if x > 0]
        if len(itls_pos) >= MIN_INTERVALS:
            out.append(Observation(f"endpoint-decode-1@{p}", "decode", 0, 0, 1, float(statistics.mean(ctxs)),
                                   statistics.median(itls_pos)))
    return out


def concurrent_observations(records, label: str) -> list[Observation]:
    """Decode points by the number of streams decoding together (see the module docstring)."""
    recs = _completed(records)
    spans = [(r.token_times_s[0], r.token_times_s[-1]) for r in recs]
    firsts = sorted(r.token_times_s[0] for r in recs)
    groups: dict[int, list[tuple[float, float]]] = {}
    for r in recs:
        t = r.token_times_s
        for k in range(1, len(t)):
            a, b = t[k - 1], t[k]
            if b <= a:
                continue  # two tokens in one network read: no interval to time
            if any(a < f <= b for f in firsts if f != t[0]):
                continue  # another stream's first token: this iteration also ran its prefill
            mid = (a + b) / 2
            active = sum(1 for s, e in spans if s <= mid < e)
            groups.setdefault(max(active, 1), []).append((b - a, r.prompt_tokens + k))
    out = []
    for k, items in sorted(groups.items()):
        if len(items) >= MIN_INTERVALS:
            out.append(Observation(
                f"endpoint-{label}-decode-{k}", "decode", 0, 0, k,
                float(statistics.mean(c for _, c in items)), statistics.median(d for d, _ in items),
            ))
    return out


def measure_endpoint(
    url: str,
    plan: EndpointPlan,
    *,
    timeout_s: float = 600.0,
    allow_remote: bool = False,
    on_phase=None,
) -> tuple[list[Observation], dict]:
    """Run both phases against `url`; return the observations and what was driven (for provenance)."""
    from calibrate.replay.http import replay_http

    phases = []
    obs: list[Observation] = []
    if on_phase:
        on_phase("single stream")
    res = replay_http(single_stream_requests(plan), url, concurrency=1, timeout_s=timeout_s, allow_remote=allow_remote)
    obs += single_stream_observations(res.records)
    phases.append(_phase_record("single", res))
    server = dict(res.config)
    for n in plan.concurrency:
        if on_phase:
            on_phase(f"{n} concurrent streams")
        res = replay_http(concurrent_requests(plan, n), url, concurrency=n, timeout_s=timeout_s, allow_remote=allow_remote)
        obs += concurrent_observations(res.records, f"c{n}")
        phases.append(_phase_record(f"concurrency-{n}", res))
    # One point per (kind, batch, context) label: merge same-id points from different phases.
    merged: dict[str, list[Observation]] = {}
    for o in obs:
        merged.setdefault(o.id, []).append(o)
    final = [
        group[0] if len(group) == 1 else Observation(
            group[0].id, group[0].kind, group[0].prefill_tokens, group[0].prefill_context, group[0].decode_batch,
            statistics.mean(g.decode_context for g in group), statistics.median(g.measured_s for g in group),
        )
        for group in merged.values()
    ]
    return final, {"server": server, "phases": phases}


def _phase_record(name: str, res) -> dict:
    recs = res.records
    done = _completed(recs)
    tokens = sum(r.output_tokens for r in done)
    t0 = min((r.arrival_s for r in recs), default=0.0)
    t1 = max((r.finish_s or 0.0 for r in done), default=0.0)
    return {
        "phase": name,
        "requests": len(recs),
        "completed": len(done),
        "output_tokens": tokens,
        "aggregate_output_tok_s": tokens / (t1 - t0) if t1 > t0 else None,
        "error": res.error,
        "failures": sorted({r.reason for r in recs if r.status != "completed"})[:3],
    }
