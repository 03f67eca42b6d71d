"""What a trace looks like: counts, rate, burstiness, length percentiles, prefix reuse; plotly HTML.

Definitions (the numbers `infersim trace stats` prints):
- duration_s = last arrival - first arrival; rate_per_s = requests / duration_s.
- burstiness_cv = std / mean of the inter-arrival gaps (population std): 1 for Poisson arrivals,
  0 for a constant rate, 1/sqrt(b) for vLLM's Gamma arrivals with burstiness b.
- prefix_reuse = reusable prompt tokens / all prompt tokens, with an unbounded cache:
  * prefix_id: a request reuses min(prefix_tokens, the largest prefix_tokens of an earlier request
    with the same prefix_id) — requests naming one prefix share their first min(prefix_tokens) tokens;
  * prefix_blocks: the leading blocks whose hash appeared in an earlier request, times
    `block_tokens` (512 in the Mooncake traces, FAST'25 README), at most the prompt.
  `block_reuse` is the Mooncake README's figure: the share of all blocks whose hash was seen earlier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from workloads.request import Request

PERCENTILES = (50, 90, 99)
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class LengthStats:
    mean: float
    p50: float
    p90: float
    p99: float
    max: int
    total: int

    @classmethod
    def of(cls, x: np.ndarray) -> "LengthStats":
        p = np.percentile(x, PERCENTILES)  # linear interpolation between order statistics
        return cls(float(x.mean()), float(p[0]), float(p[1]), float(p[2]), int(x.max()), int(x.sum()))


@dataclass(frozen=True)
class TraceStats:
    requests: int
    duration_s: float
    rate_per_s: float | None
    burstiness_cv: float | None
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    prefix_reuse: float
    block_reuse: float | None
    sessions: int
    closed_loop_requests: int
    tokens_estimated: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TraceColumns:
    """The columns stats and plots need, gathered in one pass over a (streamed) trace."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    reused_tokens: np.ndarray
    blocks_total: int
    blocks_seen_before: int
    sessions: int
    closed_loop: int
    estimated: bool

    @classmethod
    def collect(cls, requests: Iterable[Request], block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> "TraceColumns":
        arr, pr, out, reused = [], [], [], []
        longest_prefix: dict[str, int] = {}
        seen_blocks: set[int] = set()
        blocks_total = blocks_hit = 0
        sessions: set[str] = set()
        closed = 0
        estimated = False
        for r in requests:
            arr.append(r.arrival_s)
            pr.append(r.prompt_tokens)
            out.append(r.output_tokens)
            reuse = 0
            if r.prefix_id is not None:
                prev = longest_prefix.get(r.prefix_id, 0)
                reuse = min(r.prefix_tokens, prev)
                longest_prefix[r.prefix_id] = max(prev, r.prefix_tokens)
            if r.prefix_blocks is not None:
                lead, leading = 0, True
                for b in r.prefix_blocks:
                    hit = b in seen_blocks
                    blocks_hit += hit
                    if leading and hit:
                        lead += 1
                    else:
                        leading = False
                blocks_total += len(r.prefix_blocks)
                seen_blocks.update(r.prefix_blocks)
                reuse = max(reuse, min(r.prompt_tokens, lead * block_tokens))
            reused.append(reuse)
            if r.session_id is not None:
                sessions.add(r.session_id)
            closed += r.think_s is not None
            estimated |= r.tokens_estimated
        return cls(np.array(arr, dtype=float), np.array(pr, dtype=np.int64), np.array(out, dtype=np.int64),
                   np.array(reused, dtype=np.int64), blocks_total, blocks_hit, len(sessions), closed, estimated)


def trace_stats(cols: TraceColumns) -> TraceStats:
    """The summary numbers of a trace (definitions in the module docstring)."""
    n = len(cols.arrival_s)
    duration = float(cols.arrival_s[-1] - cols.arrival_s[0]) if n else 0.0
    gaps = np.diff(cols.arrival_s)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None
    return TraceStats(
        requests=n,
        duration_s=duration,
        rate_per_s=n / duration if duration > 0 else None,
        burstiness_cv=cv,
        prompt_tokens=LengthStats.of(cols.prompt_tokens),
        output_tokens=LengthStats.of(cols.output_tokens),
        prefix_reuse=float(cols.reused_tokens.sum() / cols.prompt_tokens.sum()),
        block_reuse=cols.blocks_seen_before / cols.blocks_total if cols.blocks_total else None,
        sessions=cols.sessions,
        closed_loop_requests=cols.closed_loop,
        tokens_estimated=cols.estimated,
    )


def rate_timeline(arrival_s: np.ndarray, bins: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """(bin start s, requests per second in the bin) over the trace's span."""
    span = float(arrival_s[-1] - arrival_s[0]) if len(arrival_s) else 0.0
    width = max(span / bins, 1e-3)
    edges = arrival_s[0] + width * np.arange(int(np.ceil(span / width)) + 2)
    counts, edges = np.histogram(arrival_s, bins=edges)
    return edges[:-1], counts / width


def write_html(cols: TraceColumns, stats: TraceStats, path: str | Path, title: str) -> None:
    """A self-contained page (plotly.js inline, works offline): arrival rate over time and length histograms."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t, rate = rate_timeline(cols.arrival_s)
    fig = make_subplots(
        rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]],
        subplot_titles=("Arrival rate (requests/s)", "Prompt tokens", "Output tokens"), vertical_spacing=0.14,
    )
    fig.add_trace(go.Scatter(x=t, y=rate, mode="lines", line_shape="hv", name="req/s"), row=1, col=1)
    fig.add_trace(go.Histogram(x=cols.prompt_tokens, nbinsx=60, name="prompt"), row=2, col=1)
    fig.add_trace(go.Histogram(x=cols.output_tokens, nbinsx=60, name="output"), row=2, col=2)
    fig.update_xaxes(title_text="time (s)", row=1, col=1)
    fig.update_xaxes(title_text="tokens", row=2, col=1)
    fig.update_xaxes(title_text="tokens", row=2, col=2)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    cv = f"{stats.burstiness_cv:.2f}" if stats.burstiness_cv is not None else "-"
    rate_txt = f"{stats.rate_per_s:.3g} req/s" if stats.rate_per_s else "-"
    fig.update_layout(
        title=f"{title}: {stats.requests} requests, {stats.duration_s:.1f} s, {rate_txt}, CV {cv}, "
              f"prefix reuse {stats.prefix_reuse:.1%}" + (" (token counts estimated)" if stats.tokens_estimated else ""),
        showlegend=False, height=760,
    )
    from sim.files import atomic_write_with

    atomic_write_with(path, lambda p: fig.write_html(str(p), include_plotlyjs=True, full_html=True), field="--html")
