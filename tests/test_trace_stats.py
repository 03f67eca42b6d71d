"""`workloads.stats`: the numbers of `infersim trace stats`, checked by hand on tiny traces."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from workloads.request import Request
from workloads.stats import TraceColumns, rate_timeline, trace_stats, write_html
from workloads.trace import iter_trace

MOONCAKE_FULL = Path("/work/shared/traces/conversation_trace.jsonl")


def _r(i, t, p, o, **kw) -> Request:
    return Request(id=str(i), arrival_s=t, prompt_tokens=p, output_tokens=o, max_tokens=o, **kw)


TINY = [
    _r(0, 0.0, 100, 10, prefix_id="a", prefix_tokens=50, session_id="s1"),
    _r(1, 1.0, 200, 20, prefix_id="a", prefix_tokens=80, session_id="s1", think_s=1.0),
    _r(2, 3.0, 300, 30, prefix_id="b", prefix_tokens=30),
    _r(3, 6.0, 400, 40, prefix_id="a", prefix_tokens=60),
]


def test_stats_of_a_tiny_trace_match_hand_computation():
    s = trace_stats(TraceColumns.collect(TINY))
    assert s.requests == 4
    assert s.duration_s == 6.0
    assert s.rate_per_s == pytest.approx(4 / 6)
    # gaps 1, 2, 3: mean 2, population std sqrt(2/3)
    assert s.burstiness_cv == pytest.approx(math.sqrt(2 / 3) / 2)
    # percentiles by linear interpolation: p50 of 100..400 = 250, p90 = 370, p99 = 397
    assert (s.prompt_tokens.mean, s.prompt_tokens.p50, s.prompt_tokens.p90, s.prompt_tokens.p99) == (
        250.0, 250.0, pytest.approx(370.0), pytest.approx(397.0))
    assert (s.output_tokens.max, s.output_tokens.total) == (40, 100)
    # reuse: r1 min(80, 50) = 50, r2 (new prefix b) 0, r3 min(60, 80) = 60 -> 110 of 1000 prompt tokens
    assert s.prefix_reuse == pytest.approx(0.11)
    assert s.block_reuse is None
    assert (s.sessions, s.closed_loop_requests, s.tokens_estimated) == (1, 1, False)


def test_block_reuse_counts_leading_hits_in_512_token_blocks():
    reqs = [
        _r(0, 0.0, 1500, 1, prefix_blocks=(1, 2, 3)),
        _r(1, 1.0, 1500, 1, prefix_blocks=(1, 2, 9)),   # 2 leading hits -> 1024 tokens
        _r(2, 2.0, 600, 1, prefix_blocks=(5,)),
        _r(3, 3.0, 1000, 1, prefix_blocks=(1, 7)),      # 1 leading hit -> 512 tokens
    ]
    s = trace_stats(TraceColumns.collect(reqs))
    assert s.block_reuse == pytest.approx(3 / 9)
    assert s.prefix_reuse == pytest.approx((1024 + 512) / 4600)


def test_constant_rate_has_cv_zero_and_all_at_once_has_no_rate():
    s = trace_stats(TraceColumns.collect([_r(i, i * 0.5, 10, 1) for i in range(10)]))
    assert s.burstiness_cv == pytest.approx(0.0) and s.rate_per_s == pytest.approx(10 / 4.5)
    s0 = trace_stats(TraceColumns.collect([_r(i, 0.0, 10, 1) for i in range(5)]))
    assert s0.rate_per_s is None and s0.burstiness_cv is None and s0.duration_s == 0.0


def test_rate_timeline_counts_every_request_once():
    t_cols = TraceColumns.collect([_r(i, float(i) ** 1.5, 10, 1) for i in range(50)])
    starts, rate = rate_timeline(t_cols.arrival_s, bins=20)
    width = starts[1] - starts[0]
    assert (rate * width).sum() == pytest.approx(50)


def test_html_is_self_contained(tmp_path):
    cols = TraceColumns.collect(TINY)
    out = tmp_path / "t.html"
    write_html(cols, trace_stats(cols), out, title="tiny")
    html = out.read_text()
    assert "<script src=\"http" not in html  # plotly.js inline, nothing fetched at view time
    assert "Plotly.newPlot" in html and len(html) > 1_000_000
    assert "Arrival rate (requests" in html and "Prompt tokens" in html and "Output tokens" in html


@pytest.mark.skipif(not MOONCAKE_FULL.is_file(), reason="needs the shared Mooncake trace")
def test_block_reuse_of_the_mooncake_conversation_trace_matches_its_readme(tmp_path):
    """Mooncake's FAST'25 README (and /work/shared/traces/SOURCES.md) give 36.6% block reuse."""
    from workloads.importers import convert

    s = trace_stats(TraceColumns.collect(convert(MOONCAKE_FULL).requests))
    assert s.requests == 12_031
    assert s.block_reuse == pytest.approx(0.366, abs=0.0005)
    assert s.rate_per_s == pytest.approx(3.40, abs=0.005)
