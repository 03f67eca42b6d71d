"""Speculative decoding arithmetic (sim/cost/speculative.py): tokens per verify step, the cost of a round,
when it pays and when batching erases the gain.

Expected figures are worked out by hand in each test from the numbers written in it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog.engine_config import load_engine
from sim.catalog.models import ModelSpec
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from sim.cost.speculative import SpeculativeCostModel, expected_tokens_per_step, make_cost_model
from sim.errors import ConfigError

# The toy model of tests/test_cost.py: 132,655,104 weight bytes (bf16), 8,192 KV bytes per token
# (2 layers x 4,096), matmul FLOPs per token 67,108,864 + LM head 65,536,000 per logit position.
TOY = ModelSpec(
    name="toy", n_layers=2, hidden_size=1024, n_heads=8, n_kv_heads=8, head_dim=128,
    intermediate_size=4096, vocab_size=32000, max_context=8192, tie_embeddings=True,
)
GPU = CostParams(8e11, 5e14, 5e14)  # 800 GB/s, 500 TFLOP/s: a decode step is bandwidth-bound


def test_expected_tokens_per_verify_step_is_leviathans_geometric_sum():
    # a = 0.8, k = 4: (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert expected_tokens_per_step(0.0, 4) == 1.0  # every draft rejected: the target's own token
    assert expected_tokens_per_step(1.0, 4) == 5.0  # every draft accepted: k + 1
    with pytest.raises(ConfigError, match="acceptance_rate"):
        expected_tokens_per_step(1.5, 4)


def test_eagle_round_on_the_toy_matches_the_hand_worked_case():
    # k = 2, a = 0.5 -> E = (1 - 0.125) / 0.5 = 1.75 tokens per round; one sequence at context 1000.
    # plain decode step at context c: (132,655,104 + 8,192 c + 8,192) B / 8e11 B/s
    #   c = 1000: 140,855,296 B -> 1.7606912e-4 s;  c = 1001: 140,863,488 B -> 1.7607936e-4 s
    # draft: 2 steps of an EAGLE head at 0.1 of a target step: 0.1 x (1.7606912e-4 + 1.7607936e-4) = 3.5214848e-5 s
    # verify: 3 positions after 1000 cached: 132,655,104 + 8,192,000 read + 3 x 8,192 written = 140,871,680 B
    #   -> 1.760896e-4 s (its 4.2e8 FLOP take 8.5e-7 s: still bandwidth-bound)
    # round = 2.11304448e-4 s; per token = round / 1.75 = 1.2074539886e-4 s; speedup 1.7606912e-4 / that
    target = CostModel(TOY, "bf16", GPU, kv_dtype="bf16")
    spec = SpeculativeCostModel(target, k=2, acceptance_rate=0.5, draft_cost_fraction=0.1)
    assert spec.round_time([1000]) == pytest.approx(2.11304448e-4, rel=1e-9)
    assert spec.per_token_time([1000]) == pytest.approx(2.11304448e-4 / 1.75, rel=1e-9)
    assert spec.speedup([1000]) == pytest.approx(1.7606912e-4 / (2.11304448e-4 / 1.75), rel=1e-9)
    assert spec.step_time((), (), [1000]) == pytest.approx(spec.per_token_time([1000]), rel=1e-12)


def test_a_draft_model_pays_at_batch_one_on_a_bandwidth_bound_gpu():
    # Llama 3.1 8B drafting for Llama 3.1 70B (same 128,256-token vocabulary), tp = 4 on H100s,
    # a = 0.8, k = 4: the verify reads the 70B weights once, like one decode step, and yields 3.36 tokens.
    eng = load_engine("vllm").with_overrides(
        tp=4, speculative={"method": "draft", "k": 4, "acceptance_rate": 0.8, "draft_model": "llama-3.1-8b"})
    spec = make_cost_model("h100-sxm", "llama-3.1-70b", "bf16", eng)
    assert isinstance(spec, SpeculativeCostModel) and spec.draft.model.name == "llama-3.1-8b"
    assert spec.target.breakdown(decode_context=[1000])["bound"] == "memory"
    assert spec.speedup([1000]) > 1.2
    assert spec.extra_weight_bytes == pytest.approx(spec.draft.model.weight_bytes("bf16"))


def test_batching_into_the_compute_bound_regime_erases_the_gain():
    # Llama 3.1 8B with an EAGLE head (0.1 of a step per draft), a = 0.8, k = 4, on one H100:
    # batch 1 is bandwidth-bound and gains; 1024 sequences at short contexts are compute-bound,
    # where verifying 5 positions costs ~5 decode steps of FLOPs for 3.36 expected tokens.
    # CUDA graphs are left out (cuda_graph_sizes None): a plain step of 512 replays a graph where its
    # 2,560-row verify runs eagerly, a step in the gain's curve that is not the roofline this checks
    # (graph pricing: tests/test_engine_releases.py)
    eng = load_engine("vllm").with_overrides(
        speculative={"method": "eagle", "k": 4, "acceptance_rate": 0.8, "draft_cost_fraction": 0.1})
    eng = eng.model_copy(update={"cuda_graph_sizes": None})
    spec = make_cost_model("h100-sxm", "llama-3.1-8b", "bf16", eng)
    small, large = np.array([1000]), np.full(1024, 100)
    assert spec.speedup(small) > 1.5
    assert spec.target.breakdown(decode_context=large)["bound"] == "compute"
    assert spec.speedup(large) < 1.0
    # in between, the gain shrinks monotonically with the batch
    gains = [spec.speedup(np.full(n, 100)) for n in (1, 16, 128, 512, 1024)]
    assert all(a >= b for a, b in zip(gains, gains[1:]))


@settings(deadline=None, max_examples=25)
@given(contexts=st.lists(st.integers(0, 3000), min_size=1, max_size=8), steps=st.integers(1, 60),
       k=st.integers(1, 6), a=st.floats(0.0, 1.0), budget_s=st.floats(0.0, 0.1),
       model=st.sampled_from(["toy", "gemma-3-270m"]))
def test_speculative_run_is_the_sum_of_its_steps_and_inverts_exactly(contexts, steps, k, a, budget_s, model):
    from sim.catalog.lookup import get_model

    spec_model = TOY if model == "toy" else get_model("gemma-3-270m")
    target = CostModel(spec_model, "bf16", CostParams(8e11, 5e14, 5e13, 1e-4, 1e-5), kv_dtype="bf16")
    spec = SpeculativeCostModel(target, k=k, acceptance_rate=a, draft=target)
    ctx = np.array(contexts)
    loop = sum(spec.per_token_time(ctx + i) for i in range(steps))
    assert spec.decode_run_time(ctx, steps) == pytest.approx(loop, rel=1e-9)
    j = spec.decode_steps_within(ctx, budget_s)
    assert spec.decode_run_time(ctx, j) <= budget_s < spec.decode_run_time(ctx, j + 1)
    assert spec.decode_steps_within(ctx, budget_s, max_steps=5) == min(j, 5)


def test_prefill_sharing_the_verify_forward_is_not_amortised():
    target = CostModel(TOY, "bf16", GPU, kv_dtype="bf16")
    spec = SpeculativeCostModel(target, k=3, acceptance_rate=0.7, draft_cost_fraction=0.1)
    assert spec.step_time((512,), (0,), ()) == target.step_time((512,), (0,), ())
    mixed = spec.step_time((512,), (0,), [100, 200])
    # at least the decode part's effective time, at most that plus the prefill alone
    assert spec.per_token_time([100, 200]) < mixed < spec.per_token_time([100, 200]) + target.step_time((512,), (0,))


def test_draft_model_with_another_vocabulary_is_rejected():
    eng = load_engine("vllm").with_overrides(
        speculative={"method": "draft", "k": 4, "acceptance_rate": 0.8, "draft_model": "qwen2.5-7b"})
    with pytest.raises(ConfigError, match="vocabulary"):
        make_cost_model("h100-sxm", "llama-3.1-70b", "bf16", eng.with_overrides(tp=4))


def test_speculative_settings_need_their_drafter():
    with pytest.raises(ConfigError, match="draft_cost_fraction"):
        load_engine("vllm").with_overrides(speculative={"method": "eagle", "k": 4, "acceptance_rate": 0.8})
    with pytest.raises(ConfigError, match="draft_model"):
        load_engine("vllm").with_overrides(speculative={"method": "draft", "k": 4, "acceptance_rate": 0.8})
    assert make_cost_model("h100-sxm", "llama-3.1-8b", "bf16", "vllm").__class__ is CostModel
