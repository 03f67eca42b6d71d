"""The summary of a replay, in `infersim run --json`'s schema, computed by the simulator's own code.

The measured records are loaded into `sim.metrics`' request and gap logs and summarised by
`sim.metrics.summarize`, so a measured figure and a predicted one come from the same definitions
(vLLM benchmark_serving's: TTFT, TPOT, pooled ITL, duration from first arrival to last completion,
same percentile rules). Every measured inter-token gap is one gap record.

What only the replay knows is added: `requests.failed` (started but not finished) and `error` (why
the replay stopped early, or null). Fields an HTTP client cannot observe (KV use, batch sizes) are
null unless the driver runs the engine itself (`ReplayResult.engine_stats`).
"""

from __future__ import annotations

from sim import metrics
from sim.replay.records import COMPLETED, FAILED, REJECTED, ReplayResult

_STATUS = {COMPLETED: metrics.STATUS_COMPLETED, REJECTED: metrics.STATUS_REJECTED,
           FAILED: metrics.STATUS_PENDING}


def summarize(result: ReplayResult) -> dict:
    """`infersim run --json`'s summary of measured records (plus `requests.failed` and `error`)."""
    log = metrics.RequestLog()
    gaps = metrics.GapLog()
    for r in sorted(result.records, key=lambda r: r.arrival_s):
        row = log.add(r.id, r.arrival_s, r.prompt_tokens)
        log.status[row] = _STATUS[r.status]
        log.output_tokens[row] = r.output_tokens
        if r.scheduled_s is not None:
            log.scheduled_s[row] = r.scheduled_s
        if r.first_token_s is not None:
            log.first_token_s[row] = r.first_token_s
        if r.finish_s is not None:
            log.finish_s[row] = r.finish_s
        if r.status == COMPLETED:
            for a, b in zip(r.token_times_s, r.token_times_s[1:]):
                gaps.add(b - a, 0.0, 1, 1)
    es = result.engine_stats
    batch = es.get("batch_sizes") or []
    summary = metrics.summarize(
        dict(result.config), log, gaps,
        kv_capacity_tokens=es.get("kv_capacity_tokens", 0),
        peak_used_tokens=round(es.get("kv_peak_used_fraction", 0.0) * es.get("kv_capacity_tokens", 0)),
        peak_reserved_tokens=round(es.get("kv_peak_reserved_fraction", 0.0) * es.get("kv_capacity_tokens", 0)),
        preemptions=0, batch_steps=len(batch), batch_seq_steps=sum(batch), batch_max=max(batch, default=0),
    )
    summary["requests"]["failed"] = sum(r.status == FAILED for r in result.records)
    if not es:  # an HTTP client sees neither the KV cache nor the batches
        summary["kv"] = {k: None for k in summary["kv"]}
        summary["batch_size"] = {k: None for k in summary["batch_size"]}
    summary["error"] = result.error or None
    return summary
