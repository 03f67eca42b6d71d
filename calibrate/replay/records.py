"""What a replay measured, per request, and how it is written.

Times are seconds on the trace's clock: the replay starts its clock at the first request's
`arrival_s`, so a measured `arrival_s` is comparable with the simulator's. A request's record
keeps every token's arrival time (`token_times_s`), from which TTFT, TPOT and ITL follow with
vLLM benchmark_serving's definitions (see `summarize` below).

Output files (`ReplayResult.write`): `requests.csv` and `summary.json` in `infersim run`'s schema,
plus `tokens.jsonl` (one line per request: id, status and every token time) — the raw
measurement the CSV is derived from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sim.engine import metrics

if TYPE_CHECKING:
    import pandas as pd

# `infersim run --out` requests.csv columns, in order (issue 3 / docs/contracts.md).
REQUEST_COLUMNS = (
    "id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2e_s", "preemptions", "status", "reason",
)

COMPLETED, REJECTED, FAILED = "completed", "rejected", "failed"


@dataclass(frozen=True)
class RequestRecord:
    """One request as the engine served it.

    `status`: `completed` (all tokens arrived), `rejected` (the engine or the driver refused it
    up front, e.g. longer than the context — `reason` says why) or `failed` (it started but did not
    finish: connection lost, stream ended early, timeout; the tokens that did arrive are kept).
    `scheduled_s` is when the engine admitted the request; only the local driver can see it
    (None for an HTTP endpoint).
    """

    id: str
    arrival_s: float
    prompt_tokens: int
    requested_output_tokens: int
    token_times_s: tuple[float, ...] = ()
    output_tokens: int = 0
    scheduled_s: float | None = None
    finish_s: float | None = None
    status: str = COMPLETED
    reason: str = ""

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: first token − arrival."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        """End-to-end latency: finish − arrival (completed requests only)."""
        return None if self.finish_s is None or self.status != COMPLETED else self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e − TTFT) / (output − 1), vLLM's definition."""
        if self.e2e_s is None or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def row(self) -> dict:
        return {
            "id": self.id, "arrival_s": self.arrival_s, "scheduled_s": self.scheduled_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s if self.status == COMPLETED else None,
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s, "preemptions": 0,
            "status": self.status, "reason": self.reason,
        }


@dataclass
class Measurement:
    """A request while it is being served: the driver appends token times as they arrive.

    Mutable on purpose (it is filled in as the stream goes) and frozen into a `RequestRecord` at
    the end, whatever state it reached — so a timeout or a dead server keeps what was measured.
    """

    id: str
    arrival_s: float
    prompt_tokens: int
    requested_output_tokens: int
    scheduled_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None  # set when the engine reports its own count (usage)
    finish_s: float | None = None
    status: str | None = None
    reason: str = ""

    def token(self, t_s: float, n: int = 1) -> None:
        """`n` tokens arrived at `t_s` (a streamed chunk can carry more than one)."""
        self.token_times_s.extend([t_s] * n)

    def complete(self, t_s: float) -> None:
        if self.status is None:
            self.finish_s, self.status = t_s, COMPLETED

    def fail(self, reason: str, status: str = FAILED) -> None:
        if self.status is None:
            self.status, self.reason = status, reason

    def freeze(self, default_reason: str = "not finished when the replay stopped") -> RequestRecord:
        status = self.status or FAILED
        reason = self.reason if self.status else default_reason
        n_out = self.output_tokens if self.output_tokens is not None else len(self.token_times_s)
        return RequestRecord(
            id=self.id, arrival_s=self.arrival_s, prompt_tokens=self.prompt_tokens,
            requested_output_tokens=self.requested_output_tokens,
            token_times_s=tuple(self.token_times_s), output_tokens=n_out,
            scheduled_s=self.scheduled_s, finish_s=self.finish_s, status=status, reason=reason,
        )


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay measured.

    `config`: what was driven and how (target, server kind, model, concurrency, limits, how prompt
    lengths were obtained). `engine_stats`: what only an in-process engine can see (batch sizes per
    iteration, KV capacity and peak use) — empty for an HTTP endpoint. `error`: why the replay
    stopped early (engine gone), or "".
    """

    records: tuple[RequestRecord, ...]
    config: dict
    engine_stats: dict = field(default_factory=dict)
    error: str = ""

    @property
    def requests(self) -> "pd.DataFrame":
        """The requests.csv table (`infersim run`'s columns)."""
        import pandas as pd

        return pd.DataFrame([r.row() for r in self.records], columns=list(REQUEST_COLUMNS))

    @property
    def summary(self) -> dict:
        return summarize(self)

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status != COMPLETED]

    def write(self, out_dir: str | Path) -> Path:
        """Write requests.csv, summary.json and tokens.jsonl into `out_dir` (created)."""
        from sim.files import atomic_write, atomic_write_text, atomic_write_with

        out = Path(out_dir)
        atomic_write_with(out / "requests.csv", lambda p: self.requests.to_csv(p, index=False))
        atomic_write_text(out / "summary.json", json.dumps(self.summary, indent=2, allow_nan=False) + "\n")
        with atomic_write(out / "tokens.jsonl") as f:
            for r in self.records:
                f.write(json.dumps({"id": r.id, "status": r.status, "arrival_s": r.arrival_s,
                                    "token_times_s": list(r.token_times_s)}) + "\n")
        log = self.engine_stats.get("iteration_log")
        if log:  # the in-process driver's iterations, comparable row by row with a simulation's
            import pandas as pd

            atomic_write_with(out / "iterations.csv", lambda p: pd.DataFrame(log).to_csv(p, index=False))
        return out


# The summary of a replay, in `infersim run --json`'s schema, computed by the simulator's own code.
#
# The measured records are loaded into `sim.engine.metrics`' request and gap logs and summarised by
# `sim.engine.metrics.summarize`, so a measured figure and a predicted one come from the same definitions
# (vLLM benchmark_serving's: TTFT, TPOT, pooled ITL, duration from first arrival to last completion,
# same percentile rules). Every measured inter-token gap is one gap record.
#
# What only the replay knows is added: `requests.failed` (started but not finished) and `error` (why
# the replay stopped early, or null). Fields an HTTP client cannot observe (KV use, batch sizes) are
# null unless the driver runs the engine itself (`ReplayResult.engine_stats`).

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
