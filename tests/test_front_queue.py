"""The serialized per-request front end (`EngineConfig.front_request_ms`, workloads.arrivals.FrontEnd's
`serial_s`): a burst of C simultaneous sends reaches the scheduler one request every front_request_ms, so the
k-th first token comes about k x front_request_ms later than without it, where the constant front-end delay
(request_overhead_ms) moves every one by the same amount and the host stage's per-request cost
(host_request_us, charged with the first tokens a step emits) moves all of one step's first tokens together;
0 changes nothing; the fit (calibrate/serving/front_queue.py) recovers a known serialized cost."""

import numpy as np
import pytest
from sim_helpers import engine_with_kv_capacity, random_trace, run

from workloads.request import Request

C = 16


def _ttft_ms(reqs, eng, sort=True, **kw) -> np.ndarray:
    r = run(reqs, eng, **kw).requests.sort_values("id", key=lambda s: s.astype(int))  # by request id
    t = (r["first_token_s"] - r["arrival_s"]).to_numpy() * 1e3
    return np.sort(t) if sort else t


@pytest.fixture(scope="module")
def burst():
    reqs = [Request(str(i), 0.0, 12, 64, 64) for i in range(C)]  # C sends at t = 0, waynehacking8's 12-token prompts
    eng = engine_with_kv_capacity("vllm", 50_000, request_overhead_ms=0.0, front_request_ms=0.0)
    return reqs, eng, _ttft_ms(reqs, eng)


def test_a_burst_is_served_one_request_at_a_time(burst):
    reqs, eng, base = burst
    assert np.ptp(base) < 1e-6  # without it the burst is one prefill step: every TTFT the same
    step_ms = float(base.max())  # one prefill step of the whole burst: the step grid a request can wait for
    s = 3.0
    d = _ttft_ms(reqs, eng.with_overrides(front_request_ms=s)) - base
    k = np.arange(1, C + 1)
    # the k-th request leaves the serial server k x s after the send; its first token then waits at most one step
    # boundary more (and its prefill step is shorter than the whole burst's)
    assert np.all(np.abs(d - k * s) <= step_ms)
    assert np.all(np.diff(d) >= -1e-9) and d[-1] - d[0] >= (C - 2) * s  # staggered over ~ C x s, in send order


def test_a_constant_delay_and_the_host_stage_cost_move_the_burst_together(burst):
    reqs, eng, base = burst
    d = _ttft_ms(reqs, eng.with_overrides(request_overhead_ms=3.0)) - base
    np.testing.assert_allclose(d, 3.0, atol=1e-6)  # request_overhead_ms: all the same
    # host_request_us (queue mode) charges the request work with the step's first tokens: all C wait for all C
    h = _ttft_ms(reqs, eng.with_overrides(host_request_us=3000.0, host_stage_mode="queue")) - base
    assert np.ptp(h) < 1e-6 and h[0] == pytest.approx(C * 3.0, rel=0.01)


def test_zero_changes_nothing():
    reqs = random_trace(30, 7, prompt=(50, 800), output=(5, 100))
    eng = engine_with_kv_capacity("vllm", 20_000)
    assert eng.front_request_ms == 0.0  # the presets' default
    cols = ["arrival_s", "first_token_s", "finish_s"]
    for kw in ({}, {"concurrency": 4}):
        a = run(reqs, eng, **kw).requests[cols]
        b = run(reqs, eng.with_overrides(front_request_ms=0.0), **kw).requests[cols]
        assert a.equals(b)


def test_an_open_loop_far_below_the_servers_rate_moves_by_about_its_cost():
    # 5 req/s against a 2 ms server: nearly never a queue, so each request arrives ~2 ms later
    reqs = random_trace(40, 3, rate_per_s=5.0, prompt=(50, 1500), output=(5, 200))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=0.0)
    base = _ttft_ms(reqs, eng, sort=False)
    late = _ttft_ms(reqs, eng.with_overrides(front_request_ms=2.0), sort=False)  # request by request
    assert np.median(late - base) == pytest.approx(2.0, abs=1.0)
