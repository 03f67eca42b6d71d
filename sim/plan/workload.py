"""The few numbers of a trace that capacity planning needs: its native rate and output lengths."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from sim.errors import ConfigError


@dataclass(frozen=True)
class TraceStats:
    """Summary of a trace file.

    `native_rate_rps` = (n - 1) / (last arrival - first arrival): the number of inter-arrival gaps
    over the span they cover. Replaying the trace with every arrival time divided by `s` (a
    `rate_scale` of s) multiplies it by exactly s, so rate_scale = target_rps / native_rate_rps.
    """

    path: str
    requests: int
    first_arrival_s: float
    last_arrival_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float

    @property
    def span_s(self) -> float:
        return self.last_arrival_s - self.first_arrival_s

    @property
    def native_rate_rps(self) -> float | None:
        if self.requests < 2 or not self.span_s > 0:
            return None
        return (self.requests - 1) / self.span_s

    def rate_scale_for(self, rate_rps: float) -> float:
        """The `rate_scale` that replays this trace at `rate_rps` requests per second."""
        native = self.native_rate_rps
        if native is None:
            raise ConfigError(
                "cannot replay at a request rate: all arrivals are at the same time "
                "(use concurrency, or a trace with arrival times)", file=self.path, field="arrival_s")
        return rate_rps / native


@lru_cache(maxsize=32)
def trace_stats(path: str) -> TraceStats:
    """Stream a trace once (validating it) and keep the figures above."""
    from workloads.trace import iter_trace

    n = 0
    first = last = 0.0
    prompt_sum = output_sum = 0
    for req in iter_trace(path):
        if n == 0:
            first = last = req.arrival_s
        first = min(first, req.arrival_s)
        last = max(last, req.arrival_s)
        prompt_sum += req.prompt_tokens
        output_sum += req.output_tokens
        n += 1
    if n == 0:
        raise ConfigError("trace has no requests", file=path)
    return TraceStats(path, n, first, last, prompt_sum / n, output_sum / n)
