"""Physics and queueing checks of whole simulations, each expected value worked out by hand."""

import numpy as np
import pytest
from sim_helpers import H100, MODEL, bandwidth_bound_h100, engine_with_kv_capacity, random_trace, run

from sim.catalog.engine_config import load_engine
from sim.catalog.quant import get_quant
from workloads.request import Request


def _no_overheads(preset, **kw):
    # no host step costs and no per-layer kernel floor: the hand computations below are the roofline alone
    kw.setdefault("layer_floor_us", 0.0)
    return load_engine(preset).with_overrides(iteration_overhead_ms=0.0, per_sequence_overhead_ms=0.0, **kw)


def test_single_request_decodes_at_bandwidth_times_efficiency_over_weight_plus_kv_bytes():
    hw = bandwidth_bound_h100()
    prompt, output = 1000, 200
    res = run([Request("0", 0.0, prompt, output, output)], _no_overheads("vllm"), hw=hw)
    # Bytes one decode step streams: every weight matrix once (bf16: 2 bytes per parameter; the
    # untied input-embedding table is a lookup, not streamed) + the KV of the context + its new token.
    assert get_quant("bf16").bits_per_weight == 16
    weight_bytes = 2.0 * (MODEL.n_params_total - MODEL.vocab_size * MODEL.hidden_size)
    kv_per_token = 2 * MODEL.n_layers * MODEL.n_kv_heads * MODEL.d_head * 2  # K and V, bf16
    bandwidth = H100.memory_bandwidth_gb_per_s * 1e9 * 0.8  # datasheet peak x the profile's efficiency
    # decode step j (j = 0 .. output-2) runs at context prompt + j and writes one token:
    mean_context = prompt + (output - 2) / 2 + 1
    expected_tpot = (weight_bytes + kv_per_token * mean_context) / bandwidth
    s = res.summary
    assert s["tpot_s"]["mean"] == pytest.approx(expected_tpot, rel=1e-9)
    assert s["itl_s"]["mean"] == pytest.approx(expected_tpot, rel=1e-9)
    assert s["decode_tok_s_per_request"]["mean"] == pytest.approx(1.0 / expected_tpot, rel=1e-9)
    # Llama 3.1 8B bf16 on an H100 at 80% of 3.35 TB/s: ~15 GB per token -> ~175 tokens/s
    assert 150 < 1.0 / expected_tpot < 200


def test_sequential_mean_ttft_is_half_the_queue_of_service_times_plus_prefill():
    eng = load_engine("vllm").with_overrides(scheduler="sequential", request_overhead_ms=0.0)  # TTFT = queue + prefill
    one = run([Request("0", 0.0, 500, 100, 100)], eng)
    service_s = one.summary["e2e_s"]["mean"]
    prefill_s = one.summary["ttft_s"]["mean"]
    n = 5
    res = run([Request(str(i), 0.0, 500, 100, 100) for i in range(n)], eng)
    # request i waits for i whole services, then its own prefill
    assert res.summary["ttft_s"]["mean"] == pytest.approx((n - 1) / 2 * service_s + prefill_s, rel=1e-9)
    assert res.summary["batch_size"]["max"] == 1


def test_static_batching_waits_for_the_slowest_member_before_the_next_batch():
    eng = load_engine("hf").with_overrides(max_num_seqs=4)
    outputs = [10, 20, 30, 300]
    reqs = [Request(str(i), 0.0, 200, o, o) for i, o in enumerate(outputs)]
    reqs.append(Request("late", 0.001, 200, 10, 10))
    df = run(reqs, eng).requests.set_index("id")
    first = df.loc[["0", "1", "2", "3"]]
    assert first["finish_s"].idxmax() == "3"
    assert (first.loc[["0", "1", "2"], "finish_s"] < first.loc["3", "finish_s"]).all()
    # the late request arrived long before the short members finished, yet starts only after the slowest
    assert df.loc["late", "scheduled_s"] == first["finish_s"].max()


def test_paged_kv_admits_more_concurrent_requests_than_contiguous_for_the_same_memory():
    rng = np.random.default_rng(7)
    reqs = [Request(str(i), 0.0, int(rng.integers(200, 1000)), int(rng.integers(20, 200)), 2000) for i in range(60)]
    results = {}
    for kind in ("contiguous", "paged"):
        eng = engine_with_kv_capacity("vllm", 24_000, kv_allocator=kind)
        results[kind] = run(reqs, eng).summary
    c, p = results["contiguous"], results["paged"]
    assert c["kv"]["capacity_tokens"] == pytest.approx(p["kv"]["capacity_tokens"], abs=16)
    # contiguous reserves prompt + max_tokens (>= 2200 tokens) per request: at most 10 fit
    assert c["batch_size"]["max"] <= 24_000 // 2200
    assert p["batch_size"]["max"] > 2 * c["batch_size"]["max"]
    assert p["ttft_s"]["mean"] < c["ttft_s"]["mean"]
    assert c["kv"]["peak_reserved_fraction"] > 0.8 and c["kv"]["peak_used_fraction"] < 0.5  # waste


def test_requests_that_can_never_fit_are_rejected_with_a_reason_and_the_run_goes_on():
    eng = engine_with_kv_capacity("vllm", 5000)
    reqs = [Request("ok1", 0.0, 100, 10, 10), Request("too-big", 0.1, 4000, 10, 2000),
            Request("too-long", 0.2, 130_000, 10, 2000), Request("ok2", 0.3, 100, 10, 10)]
    df = run(reqs, eng).requests.set_index("id")
    assert df.loc[["ok1", "ok2"], "status"].tolist() == ["completed", "completed"]
    assert df.loc["too-big", "status"] == "rejected" and "KV cache" in df.loc["too-big", "reason"]
    assert df.loc["too-long", "status"] == "rejected" and "context limit" in df.loc["too-long", "reason"]


def test_slots_truncate_generation_when_the_slot_context_is_full():
    eng = load_engine("llama.cpp").with_overrides(context_size=2048, max_num_seqs=2, context_mode="split")
    df = run([Request("0", 0.0, 1000, 500, 500), Request("1", 0.0, 1000, 5, 500)], eng).requests.set_index("id")
    # slot context 1024: generation stops at 1023 tokens in KV -> 1023 - 1000 + 1 = 24 tokens
    assert df.loc["0", "output_tokens"] == 24 and "truncated" in df.loc["0", "reason"]
    assert df.loc["1", "output_tokens"] == 5 and df.loc["1", "reason"] == ""


def test_closed_loop_keeps_at_most_n_requests_in_the_system():
    eng = load_engine("vllm")
    reqs = [Request(str(i), 1000.0 + i, 300, 50, 50) for i in range(12)]  # arrival_s is ignored
    df = run(reqs, eng, concurrency=3).requests
    assert df["arrival_s"].iloc[:3].tolist() == [0.0, 0.0, 0.0]
    finishes = sorted(df["finish_s"].iloc[:-3])
    # every later request arrives exactly when an earlier one finishes
    assert sorted(df["arrival_s"].iloc[3:]) == finishes[: len(df) - 3]
    times = np.sort(np.concatenate([df["arrival_s"], df["finish_s"]]))
    for t in times:
        in_system = ((df["arrival_s"] <= t) & (df["finish_s"] > t)).sum()
        assert in_system <= 3


def test_a_session_request_with_think_time_is_sent_after_the_previous_answer():
    eng = load_engine("vllm")
    reqs = [Request("a", 0.0, 300, 100, 100, session_id="s", think_s=None),
            Request("b", 0.01, 300, 20, 20, session_id="s", think_s=2.0),
            Request("c", 0.02, 300, 20, 20)]
    df = run(reqs, eng).requests.set_index("id")
    # "a" has no think_s: it opens the session; "b" waits for "a"'s answer + 2 s of thinking
    assert df.loc["b", "arrival_s"] == pytest.approx(df.loc["a", "finish_s"] + 2.0)
    assert df.loc["c", "arrival_s"] == 0.02


@pytest.mark.parametrize("scheduler,kv", [("chunked", "paged"), ("continuous", "paged"), ("static", "contiguous"),
                                          ("slots", "contiguous"), ("chunked", "contiguous"), ("slots-streams", "contiguous")])
def test_fast_forward_gives_the_same_results_as_step_by_step(scheduler, kv):
    extra = {"context_size": 16384, "context_mode": "split"} if scheduler.startswith("slots") else {}
    if scheduler == "slots-streams":  # one KV stream per sequence: a pass per run of consecutive slots
        scheduler, extra = "slots", {**extra, "per_sequence_kv_streams": True}
    preset = "llama.cpp" if scheduler == "slots" else "vllm"
    eng = engine_with_kv_capacity(preset, 12_000, scheduler=scheduler, kv_allocator=kv, max_num_seqs=6,
                                  max_num_batched_tokens=1024, **extra)
    if scheduler == "slots":
        eng = load_engine("llama.cpp").with_overrides(max_num_seqs=6, max_num_batched_tokens=1024, **extra)
    reqs = random_trace(40, seed=3, rate_per_s=8.0, prompt=(1, 900), output=(1, 300))
    ff = run(reqs, eng)
    step = run(reqs, eng, fast_forward=False)
    assert len(ff.iterations) < len(step.iterations)  # it did fast-forward
    assert ff.iterations["steps"].sum() == step.iterations["steps"].sum()
    cols = ["arrival_s", "scheduled_s", "first_token_s", "finish_s"]
    np.testing.assert_allclose(ff.requests[cols].to_numpy(), step.requests[cols].to_numpy(), rtol=1e-9, atol=1e-12)
    assert ff.requests["output_tokens"].tolist() == step.requests["output_tokens"].tolist()
    assert ff.requests["preemptions"].tolist() == step.requests["preemptions"].tolist()
    _assert_close(ff.summary, step.summary)


def _assert_close(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path



def test_per_sequence_kv_streams_price_a_mixed_iteration_as_llama_cpp_passes():
    # Request 1's prompt arrives while request 0 decodes, so one iteration prefills 1 and decodes 0.
    # Fused (one pass over the weights) it costs step(prompt + decode). With one KV stream per
    # sequence llama.cpp cuts it into ubatches (sim.cost.llamacpp): request 1 sits in slot 1, next to the
    # decoding slot 0, so the first pass holds the decode and the prompt's first token (no logits)
    # and the second pass the other 299 prompt tokens — more than one fused pass.
    from sim.cost.roofline import CostModel

    eng = _no_overheads("llama.cpp", max_num_seqs=2, prefix_caching=False)
    trace = [Request("0", 0.0, 100, 50, 50), Request("1", 0.05, 300, 10, 10)]
    cost = CostModel.from_names(MODEL, eng.default_quant, hw=H100, engine=eng)

    def mixed_iteration(res):
        its = res.iterations
        m = its[(its["prefill_tokens"] > 0) & (its["decode_seqs"] > 0)]
        assert len(m) == 1 and int(m["prefill_tokens"].iloc[0]) == 300
        return float(m["duration_s"].iloc[0])

    fused = run(trace, eng)
    split = run(trace, eng.with_overrides(per_sequence_kv_streams=True))
    assert split.summary["config"]["per_sequence_kv_streams"] is True
    t_fused, t_split = mixed_iteration(fused), mixed_iteration(split)
    # request 0's context at that iteration: the one that reproduces the fused duration
    ctx = [c for c in range(100, 151) if cost.step_time((300,), (0,), (c,)) == pytest.approx(t_fused, rel=1e-12)]
    assert len(ctx) >= 1
    c = ctx[0]
    passes = cost.step_time((), (), (c, 0), outputs=1) + cost.step_time((299,), (1,), ())
    assert t_split == pytest.approx(passes, rel=1e-12)
    # not the naive split (a decode pass, then the whole prompt), which a 1-row decode pass would give
    assert abs(t_split - (cost.step_time((), (), (c,)) + cost.step_time((300,), (0,), ()))) > 1e-6
    assert t_split > t_fused
    # request 1 waits longer for its first token by exactly the difference
    ttft = {r: res.requests.set_index("id").loc["1", "ttft_s"] for r, res in (("f", fused), ("s", split))}
    assert ttft["s"] - ttft["f"] == pytest.approx(t_split - t_fused, rel=1e-9)


def test_a_prompt_longer_than_the_ubatch_runs_as_one_pass_per_ubatch():
    # llama-server's defaults: -b 2048, -ub 512, one KV stream. A 1,500-token prompt is one
    # iteration of three passes over the weights (split_simple): 512 + 512 + 476 tokens, logits on
    # the last; each pass streams the weights and pays the GEMM start-up again.
    from sim.cost.roofline import CostModel

    eng = _no_overheads("llama.cpp", max_num_seqs=1, prefix_caching=False)
    assert eng.ubatch_tokens == 512 and eng.max_num_batched_tokens == 2048 and not eng.per_sequence_kv_streams
    trace = [Request("0", 0.0, 1500, 3, 3)]
    # a memory-bound H100 (compute free): what the shipped profile's fitted attention efficiency does to
    # the one pass's 1,536 padded KV cells per row does not enter the comparison
    hw = bandwidth_bound_h100()
    cost = CostModel.from_names(MODEL, eng.default_quant, hw=hw, engine=eng)
    passes = (cost.step_time((512,), (0,), (), outputs=0) + cost.step_time((512,), (512,), (), outputs=0)
              + cost.step_time((476,), (1024,), (), outputs=1))
    one_pass = cost.step_time((1500,), (0,), ())
    assert passes > one_pass
    split = run(trace, eng, hw=hw)
    fused = run(trace, eng.with_overrides(ubatch_tokens=2048), hw=hw)  # -ub 2048: the batch is one pass
    assert split.summary["config"]["ubatch_tokens"] == 512
    ttft = {k: float(r.requests["ttft_s"].iloc[0]) for k, r in (("split", split), ("fused", fused))}
    assert ttft["split"] == pytest.approx(passes, rel=1e-12)
    assert ttft["fused"] == pytest.approx(one_pass, rel=1e-12)


def test_more_decodes_than_the_ubatch_take_one_pass_per_ubatch():
    # 7 sequences decoding with -ub 3 (one KV stream): every decode step is three passes of 3, 3 and 1
    # sequences, each streaming the weights: in slot order, as split_simple cuts the batch.
    from sim.cost.roofline import CostModel

    eng = _no_overheads("llama.cpp", max_num_seqs=7, prefix_caching=False, ubatch_tokens=3,
                        max_num_batched_tokens=2048)
    trace = [Request(str(i), 0.0, 64, 40, 40) for i in range(7)]
    cost = CostModel.from_names(MODEL, eng.default_quant, hw=H100, engine=eng)
    for fast in (False, True):
        res = run(trace, eng, fast_forward=fast)
        its = res.iterations
        decode_only = its[(its["prefill_tokens"] == 0) & (its["decode_seqs"] == 7)]
        assert len(decode_only) >= 1
        row = decode_only.iloc[0]
        c = (row["kv_used_tokens"] - 7) / 7  # each context before the step (same prompt, admitted together)
        steps = int(row["steps"]) if "steps" in its else 1
        three = cost.decode_run_time([c] * 3, steps) * 2 + cost.decode_run_time([c], steps)
        assert row["duration_s"] == pytest.approx(three, rel=1e-9)
        assert row["duration_s"] > cost.decode_run_time([c] * 7, steps)


def test_per_sequence_kv_streams_price_one_pass_per_run_of_consecutive_slots():
    # Three requests fill slots 0, 1, 2; the one in slot 1 finishes first, leaving slots 0 and 2
    # decoding: llama.cpp runs them as two passes (split_equal packs consecutive seq_ids only).
    from sim.cost.roofline import CostModel

    eng = _no_overheads("llama.cpp", max_num_seqs=3, prefix_caching=False, context_size=3 * 4096,
                        context_mode="split", per_sequence_kv_streams=True)
    trace = [Request("0", 0.0, 50, 400, 400), Request("1", 0.0, 50, 20, 20), Request("2", 0.0, 50, 400, 400)]
    res = run(trace, eng, fast_forward=False)
    cost = CostModel.from_names(MODEL, eng.default_quant, hw=H100, engine=eng)
    its = res.iterations
    done_1 = res.requests.set_index("id").loc["1", "finish_s"]
    after = its[(its["start_s"] >= done_1) & (its["decode_seqs"] == 2)]
    assert len(after) > 10
    row = after.iloc[0]
    # both remaining sequences have the same context (same prompt, admitted together)
    c = (row["kv_used_tokens"] - 2) / 2  # KV after the step holds each context + its new token
    two_passes = 2 * cost.step_time((), (), (c,))
    assert row["duration_s"] == pytest.approx(two_passes, rel=1e-9)
    assert two_passes > cost.step_time((), (), (c, c))
