"""The front end's per-request spread (`EngineConfig.front_jitter`, workloads.arrivals.FrontEnd's `jitter`): each
request waits its own delay, request_overhead_ms x (1 + jitter x (2 u - 1)) with u fixed by its id, so the mean is
the constant delay's and the same inputs give the same numbers; 0 is the constant delay; out-of-range values are
refused; in a closed loop of identical requests it takes away the cohort jumps a constant delay makes (a small
change of the delay moving a whole cohort across a step boundary, docs/ttft-misses.md section 4)."""

import numpy as np
import pytest
from sim_helpers import engine_with_kv_capacity, random_trace, run

from sim.errors import ConfigError
from workloads.arrivals import FrontEnd, _unit
from workloads.request import Request

COLS = ["arrival_s", "first_token_s", "finish_s"]


def _req(res):
    return res.requests.sort_values("id", key=lambda s: s.astype(int)).reset_index(drop=True)


@pytest.fixture(scope="module")
def sparse():
    # one request every 5 s, each done in well under a second: no two overlap, so a request's TTFT moves by its own
    # front-end delay and nothing else
    reqs = random_trace(40, 11, rate_per_s=0.2, prompt=(50, 300), output=(5, 20))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=0.0, front_request_ms=0.0)
    return reqs, eng, _req(run(reqs, eng))


def test_each_request_waits_its_own_delay_with_the_constant_delays_mean(sparse):
    reqs, eng, base = sparse
    d = 0.050
    late = _req(run(reqs, eng.with_overrides(request_overhead_ms=d * 1e3, front_jitter=1.0)))
    assert np.array_equal(base["arrival_s"], late["arrival_s"])  # logged at the send
    shift = (late["first_token_s"] - base["first_token_s"]).to_numpy()
    np.testing.assert_allclose(late["finish_s"] - base["finish_s"], shift, atol=1e-9)  # TPOT untouched
    want = np.array([d * (1.0 + (2.0 * _unit(i) - 1.0)) for i in late["id"]])
    np.testing.assert_allclose(shift, want, atol=1e-9)
    assert shift.min() >= 0.0 and shift.max() <= 2 * d  # jitter 1: spread over [0, 2 d]
    assert np.ptp(shift) > d  # really spread, not one constant
    assert abs(shift.mean() - d) < 0.2 * d  # the mean stays the constant delay's


def test_zero_is_the_constant_delay_and_a_run_repeats():
    reqs = random_trace(30, 7, prompt=(50, 800), output=(5, 100))
    assert engine_with_kv_capacity("tgi", 20_000).front_jitter == 0.0  # the field's default (a preset without it)
    const = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=20.0, front_jitter=0.0)
    # 0: one constant delay, every first token of an open loop 20 ms later than with no front end
    base, late = _req(run(reqs, const.with_overrides(request_overhead_ms=0.0))), _req(run(reqs, const))
    np.testing.assert_allclose(late["first_token_s"] - base["first_token_s"], 0.020, atol=1e-9)
    j = const.with_overrides(front_jitter=1.0)
    for kw in ({}, {"concurrency": 4}):
        a, b = run(reqs, const, **kw).requests[COLS], run(reqs, j, **kw).requests[COLS]
        assert b.equals(run(reqs, j, **kw).requests[COLS])  # deterministic: u comes from the id, not a stream
        assert not a.equals(b)


def test_out_of_range_is_refused():
    eng = engine_with_kv_capacity("vllm", 20_000)
    with pytest.raises(ConfigError, match="front_jitter"):
        eng.with_overrides(front_jitter=1.5)
    with pytest.raises(ConfigError, match="jitter"):
        FrontEnd(None, 0.01, 0.0, -0.1)


def test_reach_times_is_what_the_front_end_applies():
    fe = FrontEnd(None, 0.02, 0.003, 0.5)
    sends = [(0.0, "0"), (0.0, "1"), (0.001, "2"), (0.5, "3")]
    got = fe.reach_times(sends)
    leaves = [0.003, 0.006, 0.009, 0.503]  # the serial server, one request at a time, in send order
    want = [t + 0.02 * (1 + 0.5 * (2 * _unit(i) - 1)) for t, (_, i) in zip(leaves, sends)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert fe.reach_times(sends) == got  # it leaves the front end as it was


def _median_ttft_ms(eng, d_ms: float, jitter: float) -> float:
    reqs = [Request(str(i), 0.0, 1000, 100, 100) for i in range(256)]  # a fixed-length random dataset's requests
    r = run(reqs, eng.with_overrides(request_overhead_ms=d_ms, front_jitter=jitter), concurrency=32).requests
    return float(np.median((r["first_token_s"] - r["arrival_s"]).to_numpy()) * 1e3)


def test_jitter_takes_away_the_cohort_jumps_of_a_lock_step_closed_loop():
    eng = engine_with_kv_capacity("vllm", 400_000, request_overhead_ms=0.0, front_request_ms=0.0)
    grid = np.arange(0.0, 31.0, 3.0)
    jumps = {}
    for j in (0.0, 1.0):
        med = np.array([_median_ttft_ms(eng, d, j) for d in grid])
        jumps[j] = float(np.max(np.diff(med)))
    # a 3 ms longer constant delay moves the whole cohort a step: the median jumps by far more than 3 ms; with the
    # delay spread the cohorts come apart and no 3 ms step moves the median by half that much
    assert jumps[0.0] > 10 * 3.0
    assert jumps[1.0] < 0.5 * jumps[0.0]


@pytest.mark.parametrize("concurrency", [None, 3])
def test_a_cluster_drains_with_a_spread_front_end(concurrency):
    reqs = random_trace(30, 11, prompt=(50, 800), output=(5, 100))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=80.0, front_jitter=1.0)
    res = _req(run(reqs, eng, replicas=2, router="least-outstanding", concurrency=concurrency))
    assert len(res) == 30 and res["finish_s"].notna().all()  # every request completes
    assert ((res["first_token_s"] - res["arrival_s"]) >= 0.0).all()
