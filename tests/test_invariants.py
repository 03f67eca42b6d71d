"""The simulator's guarantees, as property tests over random traces and configurations.

1. Request conservation: every request completes or is rejected with a reason.
2. KV conservation: allocated + free = total after every operation; everything free at the end
   (`check_invariants=True` asserts both inside the run).
3. Causality: arrival <= scheduled <= first token <= finish.
4. Clock monotonicity: iterations never overlap or go back in time.
5. Determinism: the same inputs give byte-identical JSON.
6. Work conservation: the engine never idles while a request waits that it could admit.
7. Used KV never exceeds reserved KV; outputs respect max_tokens.
8. Time homogeneity: every step s times as long is the same run on a clock s times slower.

The same guarantees with shared prefix blocks (tests/test_prefix_cache.py), several replicas behind
a router (tests/test_cluster.py) and prefill/decode pools with KV transfers
(tests/test_cluster_disagg.py) are property tests there.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import engine_with_kv_capacity, run

from sim.catalog.engine_config import load_engine
from sim.engine.kv import ALLOCATORS
from sim.engine.schedulers import SCHEDULERS
from workloads.request import Request

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0.0, 0.5, allow_nan=False), min_size=n, max_size=n))
    arrivals = np.cumsum(gaps)
    out = []
    for i in range(n):
        prompt = draw(st.integers(1, 3000))
        output = draw(st.integers(1, 300))
        budget = output + draw(st.integers(0, 500))
        out.append(Request(str(i), float(arrivals[i]), prompt, output, budget))
    return out


@st.composite
def configs(draw):
    scheduler = draw(st.sampled_from(list(SCHEDULERS)))  # every registered policy and allocator
    kv = draw(st.sampled_from(list(ALLOCATORS)))
    seqs = draw(st.integers(1, 12))
    budget = draw(st.sampled_from([256, 1024, 4096]))
    block = draw(st.sampled_from([1, 16, 32]))
    if SCHEDULERS[scheduler].per_slot_context:
        ctx = draw(st.sampled_from([2048, 8192, 32768]))
        mode = draw(st.sampled_from(["split", "unified"]))
        return load_engine("llama.cpp").with_overrides(
            kv_allocator=kv, max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=block,
            context_size=max(ctx, seqs * 2), context_mode=mode)
    capacity = draw(st.sampled_from([4000, 12_000, 60_000]))
    # no front-end latency: the invariants read a request's send time as the time it reaches the queue
    return engine_with_kv_capacity("vllm", capacity, scheduler=scheduler, kv_allocator=kv, max_num_seqs=seqs,
                                   max_num_batched_tokens=budget, block_size=block, request_overhead_ms=0.0)


@SETTINGS
@given(reqs=traces(), eng=configs(), closed=st.sampled_from([None, None, 2]))
def test_every_request_completes_or_is_rejected_and_time_flows_forward(reqs, eng, closed):
    res = run(reqs, eng, concurrency=closed)  # asserts KV conservation and clock after every operation
    df = res.requests
    assert len(df) == len(reqs)
    assert set(df["status"]) <= {"completed", "rejected"}
    rejected = df[df["status"] == "rejected"]
    assert (rejected["reason"].str.len() > 0).all()
    done = df[df["status"] == "completed"]
    assert (done["arrival_s"] <= done["scheduled_s"]).all()
    assert (done["scheduled_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    by_id = {r.id: r for r in reqs}
    for rid, out in zip(done["id"], done["output_tokens"]):
        r = by_id[rid]
        assert 1 <= out <= min(r.output_tokens, r.max_tokens)
    it = res.iterations
    starts = it["start_s"].to_numpy()
    ends = starts + it["duration_s"].to_numpy()
    assert (it["duration_s"] >= 0).all()
    assert (starts[1:] >= ends[:-1] - 1e-12).all()  # no overlap, never back in time
    assert (it["kv_used_tokens"] <= it["kv_reserved_tokens"]).all()
    s = res.summary
    assert s["requests"]["completed"] + s["requests"]["rejected"] == s["requests"]["total"]
    assert 0 <= s["kv"]["peak_used_fraction"] <= s["kv"]["peak_reserved_fraction"] <= 1
    assert s["batch_size"]["max"] <= eng.max_num_seqs or eng.scheduler == "sequential"


@SETTINGS
@given(reqs=traces(), eng=configs())
def test_the_engine_never_idles_while_an_admissible_request_waits(reqs, eng):
    res = run(reqs, eng)
    it = res.iterations
    starts = it["start_s"].to_numpy()
    ends = starts + it["duration_s"].to_numpy()
    # idle intervals: before the first iteration and between iterations
    idle = [(e, s) for e, s in zip(ends[:-1], starts[1:]) if s > e]
    df = res.requests
    # a request that passed the arrival checks fits an empty engine: it is never given up on
    assert not df["reason"].str.contains("idle engine").any()
    waited = df[(df["status"] == "completed") & (df["scheduled_s"] > df["arrival_s"])]
    for a, sch in zip(waited["arrival_s"], waited["scheduled_s"]):
        for lo, hi in idle:
            assert not (lo < sch and hi > a and min(hi, sch) - max(lo, a) > 1e-12), (a, sch, lo, hi)


@settings(max_examples=10, deadline=None)
@given(reqs=traces(), eng=configs())
def test_the_same_inputs_give_byte_identical_json(reqs, eng):
    a = run(reqs, eng).to_json()
    b = run(list(reqs), eng).to_json()
    assert a == b


@settings(max_examples=25, deadline=None)
@given(reqs=traces(), eng=configs())
def test_fast_forward_matches_step_by_step_on_random_configurations(reqs, eng):
    ff = run(reqs, eng)
    step = run(reqs, eng, fast_forward=False)
    cols = ["arrival_s", "scheduled_s", "first_token_s", "finish_s"]
    np.testing.assert_allclose(ff.requests[cols].to_numpy(), step.requests[cols].to_numpy(), rtol=1e-9, atol=1e-12)
    assert ff.requests["status"].tolist() == step.requests["status"].tolist()
    assert ff.summary["kv"]["preemptions"] == step.summary["kv"]["preemptions"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for stat, v in ff.summary[key].items():
            w = step.summary[key][stat]
            assert (v is None and w is None) or abs(v - w) <= 1e-9 * max(abs(w), 1e-9), (key, stat, v, w)


@settings(max_examples=25, deadline=None)
@given(reqs=traces(), eng=configs(), slow=st.floats(0.5, 2.0))
def test_a_slower_machine_is_the_same_run_on_a_longer_clock(reqs, eng, slow):
    """8. Time homogeneity: a machine on which every step takes `slow` times as long, serving arrivals
    a, is the machine as it is serving arrivals a / slow, with every time multiplied by `slow`
    (benchmarks/fidelity.py's "checked" prediction simulates a drifted machine this way)."""
    from dataclasses import replace

    from sim.catalog.hardware import load_profile
    from sim.cost.params import CostParams

    params = CostParams.from_profile(load_profile("h100-sxm"), eng.default_quant, eng)
    slower = replace(params, bandwidth_bytes_per_s=params.bandwidth_bytes_per_s / slow,
                     matmul_flops_per_s=params.matmul_flops_per_s / slow,
                     attention_flops_per_s=params.attention_flops_per_s / slow,
                     iteration_overhead_s=params.iteration_overhead_s * slow,
                     per_sequence_overhead_s=params.per_sequence_overhead_s * slow)
    # the engine's per-layer kernel floor (a time: vLLM ships 150 us) lengthens with the machine too
    a = run(reqs, eng.with_overrides(layer_floor_us=eng.layer_floor_us * slow), cost_params=slower).requests
    b = run([replace(r, arrival_s=r.arrival_s / slow) for r in reqs], eng, cost_params=params).requests
    assert list(a["status"]) == list(b["status"]) and list(a["output_tokens"]) == list(b["output_tokens"])
    for col in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col].to_numpy(float), b[col].to_numpy(float) * slow, rtol=1e-9, atol=1e-9)
