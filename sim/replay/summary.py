"""The summary of a replay, in `infersim run --json`'s schema.

Definitions are vLLM benchmark_serving's (benchmarks/benchmark_serving.py, `calculate_metrics`),
the same the simulator reports: TTFT = first token − arrival; TPOT = (e2e − TTFT)/(output − 1)
over requests with more than one output token; ITL = the pooled gaps between consecutive tokens of
every request; duration = first arrival to last completion; throughputs count completed requests
only. Percentiles are numpy's linear interpolation, as vLLM's.

Fields an HTTP client cannot observe (KV use, batch sizes) are null unless the driver runs the
engine itself (`ReplayResult.engine_stats`).
"""

from __future__ import annotations

import numpy as np

from sim.replay.records import COMPLETED, FAILED, REJECTED, ReplayResult, finite_or_none


def stats(values, keys=("mean", "p50", "p90", "p99")) -> dict:
    """Mean and percentiles of `values` (seconds or tokens/s); nulls when there is nothing to summarise."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    out = {}
    for k in keys:
        if arr.size == 0:
            out[k] = None
        elif k == "mean":
            out[k] = finite_or_none(arr.mean())
        elif k == "max":
            out[k] = finite_or_none(arr.max())
        else:
            out[k] = finite_or_none(np.percentile(arr, float(k[1:])))
    return out


def summarize(result: ReplayResult) -> dict:
    """`infersim run --json`'s summary computed from measured records."""
    recs = result.records
    done = [r for r in recs if r.status == COMPLETED]
    if done:
        start_s = min(r.arrival_s for r in recs)
        duration_s = max(r.finish_s for r in done) - start_s
    else:
        duration_s = 0.0
    out_tokens = sum(r.output_tokens for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)

    def per_s(x: float) -> float | None:
        return finite_or_none(x / duration_s) if duration_s > 0 else None

    itl = [b - a for r in done for a, b in zip(r.token_times_s, r.token_times_s[1:])]
    decode_rate = [(r.output_tokens - 1) / (r.e2e_s - r.ttft_s) for r in done
                   if r.output_tokens > 1 and r.e2e_s - r.ttft_s > 0]
    es = result.engine_stats
    return {
        "config": dict(result.config),
        "requests": {
            "total": len(recs), "completed": len(done),
            "rejected": sum(r.status == REJECTED for r in recs),
            "failed": sum(r.status == FAILED for r in recs),
        },
        "duration_s": finite_or_none(duration_s),
        "throughput": {
            "output_tok_s": per_s(out_tokens), "total_tok_s": per_s(out_tokens + in_tokens),
            "requests_per_s": per_s(len(done)),
        },
        "ttft_s": stats(r.ttft_s for r in done),
        "tpot_s": stats(r.tpot_s for r in done),
        "itl_s": stats(itl),
        "e2e_s": stats(r.e2e_s for r in done),
        "decode_tok_s_per_request": stats(decode_rate, keys=("mean", "p50")),
        "kv": {
            "capacity_tokens": es.get("kv_capacity_tokens"),
            "peak_used_fraction": finite_or_none(es.get("kv_peak_used_fraction")),
            "peak_reserved_fraction": finite_or_none(es.get("kv_peak_reserved_fraction")),
            "preemptions": 0 if es else None,
        },
        "batch_size": stats(es.get("batch_sizes", []), keys=("mean", "max")),
        "error": result.error or None,
    }
