"""The client-overhead experiment's pieces (benchmarks/client_overhead/): the mock engine, the clients, the fit.

Runs the mock server and bench.py's httpx client (the aiohttp client where aiohttp is installed) at C = 1
and 4 with 8 tokens and checks what the experiment's arithmetic relies on: every client request is in the
server's log, each stream delivers max_tokens tokens, and the two processes' timestamps are causal on the
shared monotonic clock (client t0 <= server received <= server first token <= client first token).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "client_overhead"))

import sweep  # noqa: E402

CLIENTS = [c for c, lib in (("bench_httpx", "httpx"), ("vllm_aiohttp", "aiohttp"))
           if importlib.util.find_spec(lib) is not None]


def test_slope_through_the_lowest_load_recovers_a_linear_growth():
    xs = [1, 2, 4, 8, 16]
    assert sweep.slope_through_lowest(xs, [10 + 1.5 * (x - 1) for x in xs]) == pytest.approx(1.5)
    # An offset at the lowest load is removed, not fitted: a flat curve has slope 0 whatever its level.
    assert sweep.slope_through_lowest(xs, [7.0] * 5) == 0.0


def test_step_table_interpolates_the_measured_itl_between_concurrencies():
    assert sweep.step_ms_for(4, "vllm_h100") == 4.14
    assert 4.14 < sweep.step_ms_for(8, "vllm_h100") < 4.34
    assert sweep.step_ms_for(256, "vllm_h100") == 5.55
    assert sweep.step_ms_for(64, "3") == 3.0


@pytest.mark.skipif(not CLIENTS, reason="neither httpx nor aiohttp is installed")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("c", [1, 4])
def test_every_request_is_matched_and_causal_across_client_and_server(client, c):
    row = sweep.run_point(client, c, 2 * c, 8, step_ms=2.0, prefill_ms=1.0,
                          client_python=sys.executable, server_python=sys.executable)
    assert row["requests"] == 2 * c                      # run_point asserts all are matched and complete
    assert row["send_min_ms"] >= 0 and row["recv_min_ms"] >= 0   # per request: t0 <= received, written <= seen
    # The server's share: at least the prefill delay, at most prefill + one step + scheduling slack.
    assert row["server_ttft_min_ms"] >= 1.0
    assert row["server_ttft_ms"] < 1.0 + 2.0 + 50.0
    assert row["client_ttft_ms"] >= row["server_ttft_ms"]
    assert row["server_cpu_s"] > 0 and row["client_cpu_s"] > 0


@pytest.mark.skipif(importlib.util.find_spec("httpx") is None, reason="httpx is not installed")
def test_bench_py_opens_a_connection_per_request_and_draining_the_body_reuses_them():
    """bench.py leaves the stream at `data: [DONE]` before the chunked body's end, so httpcore closes the
    connection: one TCP connection per request whatever the keep-alive limit; reading to the end reuses them."""
    kw = dict(c=2, total=6, max_tokens=4, step_ms=1.0, prefill_ms=0.0,
              client_python=sys.executable, server_python=sys.executable)
    assert sweep.run_point("bench_httpx", **kw)["connections"] == 6
    assert sweep.run_point("bench_httpx_drain", **kw)["connections"] <= 2
