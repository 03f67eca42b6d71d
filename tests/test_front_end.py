"""The engine's per-request front-end latency (`EngineConfig.request_overhead_ms`,
workloads.arrivals.FrontEnd): a request reaches the queue that long after its send, so an open loop's
TTFT and E2E shift by exactly that and nothing else moves; a closed loop's clients wait for it; 0 is
the engine without it; a cluster and a disaggregated deployment drain with it. The delay is the constant one here
(front_jitter 0); tests/test_front_jitter.py covers its per-request spread."""

import numpy as np
import pytest
from sim_helpers import engine_with_kv_capacity, random_trace, run

COLS = ["arrival_s", "first_token_s", "finish_s"]


def _req(res):
    return res.requests.sort_values("id", key=lambda s: s.astype(int)).reset_index(drop=True)


def test_an_open_loop_shifts_ttft_and_e2e_by_the_overhead_and_nothing_else():
    reqs = random_trace(40, 3, rate_per_s=5.0, prompt=(50, 1500), output=(5, 200))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=0.0, front_jitter=0.0)  # the preset without its front end
    base = _req(run(reqs, eng))
    d = 0.120
    late = _req(run(reqs, eng.with_overrides(request_overhead_ms=d * 1e3)))
    assert np.array_equal(base["arrival_s"], late["arrival_s"])  # logged at the send
    # the server sees the same stream d later: every first token and finish moves by d
    np.testing.assert_allclose(late["first_token_s"] - base["first_token_s"], d, atol=1e-9)
    np.testing.assert_allclose(late["finish_s"] - base["finish_s"], d, atol=1e-9)


def test_a_closed_loop_client_waits_for_the_overhead():
    reqs = random_trace(24, 5, prompt=(100, 400), output=(20, 60))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=0.0, front_jitter=0.0)
    base = run(reqs, eng, concurrency=2)
    d = 0.5
    late = _req(run(reqs, eng.with_overrides(request_overhead_ms=d * 1e3), concurrency=2))
    ttft = late["first_token_s"] - late["arrival_s"]
    assert (ttft >= d - 1e-9).all()
    # two clients, each request at least d + its service: the run lasts at least 12 d
    assert late["finish_s"].max() >= 12 * d
    assert late["finish_s"].max() > _req(base)["finish_s"].max() + 10 * d


def test_zero_is_the_engine_without_a_front_end():
    # vLLM 0.10 ships no front-end latency (its per-release fit fails the ship rule; 0.11 ships 25 ms)
    reqs = random_trace(30, 7)
    eng = engine_with_kv_capacity("vllm@0.10", 4000)
    assert eng.request_overhead_ms == 0.0
    a, b = _req(run(reqs, eng)), _req(run(reqs, eng.with_overrides(request_overhead_ms=0.0)))
    assert a[COLS].equals(b[COLS])


@pytest.mark.parametrize("concurrency", [None, 3])
def test_a_cluster_drains_with_a_front_end(concurrency):
    reqs = random_trace(30, 11, prompt=(50, 800), output=(5, 100))
    eng = engine_with_kv_capacity("vllm", 20_000, request_overhead_ms=80.0, front_jitter=0.0)
    res = _req(run(reqs, eng, replicas=2, router="least-outstanding", concurrency=concurrency))
    assert len(res) == 30 and res["finish_s"].notna().all()
    assert ((res["first_token_s"] - res["arrival_s"]) >= 0.08 - 1e-9).all()
