"""The eager-prefill host floor (`sim.cost.eager_prefill`, EngineConfig.eager_prefill_moe_layer_us): a step
with prompt tokens of a MoE model lasts at least n_moe_layers x the field, decode steps and dense models
are untouched, 0 changes nothing, and its ship rule (calibrate/serving/eagerprefill.py) decides as written."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from calibrate.serving.eagerprefill import MIN_TTFT_GAIN_PT, ships, shipped_value
from sim.bench.serve import Deployment, ServeClient, run_client
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cost.eager_prefill import (CITED_US_PER_MOE_LAYER, EagerPrefill, eager_prefill_floor_s,
                                    with_eager_prefill)
from sim.cost.speculative import make_cost_model
from sim.engine.pricing import StepBatch

from sim_helpers import assert_step_model_contract


def _decode_batch(lanes, ctx) -> StepBatch:
    state = SimpleNamespace(n_decoding=-1, decode_ctx_sum=None)
    return StepBatch(state, np.asarray(lanes, dtype=np.int64), [], [], np.asarray(ctx, dtype=np.int64))


def test_cited_value_is_the_pr_log_over_deepseek_moe_layers():
    # sglang PR #12160: "forward cost-82.6406478881836 ms" for DeepSeek-V3's eager 1-token prefill; 58 MoE layers
    assert get_model("deepseek-r1").n_routed_layers == 58
    assert CITED_US_PER_MOE_LAYER == pytest.approx(82.6406478881836e3 / 58)
    assert 1420 < CITED_US_PER_MOE_LAYER < 1430


def test_floor_counts_moe_layers_only():
    on = load_engine("sglang").model_copy(update={"eager_prefill_moe_layer_us": 1000.0, "eager_prefill_launch_us": 0.0})
    assert eager_prefill_floor_s(get_model("deepseek-r1"), on) == pytest.approx(58 * 1e-3)
    assert eager_prefill_floor_s(get_model("qwen3-235b-a22b"), on) == pytest.approx(94 * 1e-3)
    assert eager_prefill_floor_s(get_model("llama-3.3-70b"), on) == 0.0  # dense: no MoE layer
    off = on.model_copy(update={"eager_prefill_moe_layer_us": 0.0})
    assert eager_prefill_floor_s(get_model("deepseek-r1"), off) == 0.0
    m = object()
    assert with_eager_prefill(m, get_model("deepseek-r1"), off) is m  # off: the step model itself
    assert with_eager_prefill(m, get_model("llama-3.3-70b"), on) is m
    with pytest.raises(ValueError):
        EagerPrefill(m, 0.0)


class _Inner:
    """A stand-in step model: every batch 10 ms, a run of k decode steps k x 10 ms."""

    tokens_per_step = 1.0

    def batch_time(self, b):
        return 0.010

    def run_time(self, b, k):
        return 0.010 * k

    def steps_within(self, b, budget_s, max_steps):
        return min(max_steps, int(budget_s / 0.010))

    def run_limit(self, b):
        return None


def test_wrapper_floors_prompt_steps_only():
    m = EagerPrefill(_Inner(), 0.050)
    prompt = SimpleNamespace(prefill_tokens=[700])
    decode = SimpleNamespace(prefill_tokens=[])
    assert m.batch_time(prompt) == 0.050  # host-bound: the launches, not the GPU's 10 ms
    assert m.batch_time(decode) == 0.010  # decode steps replay CUDA graphs: untouched
    assert m.run_time(decode, 3) == pytest.approx(0.030)
    assert m.tokens_per_step == 1.0  # other attributes come from the wrapped model
    assert EagerPrefill(_Inner(), 0.005).batch_time(prompt) == 0.010  # GPU-bound: the GPU's time


def test_wrapper_keeps_the_step_model_contract_on_decodes():
    hw, eng = load_profile("h100-sxm"), load_engine("sglang")
    cost = make_cost_model(hw, "qwen3-30b-a3b", None, eng)
    m = EagerPrefill(cost, 0.05)
    one, _, _ = assert_step_model_contract(m, lambda: _decode_batch([0, 1, 2, 3], [500, 900, 1300, 700]))
    assert one == pytest.approx(cost.run_time(_decode_batch([0, 1, 2, 3], [500, 900, 1300, 700]), 1))


def _ttft_ms(us: float) -> float:
    dep = Deployment(hw="b200", model="deepseek-r1", quant="fp8", engine="sglang",
                     overrides={"tp": 8, "eager_prefill_moe_layer_us": us, "eager_prefill_launch_us": 0.0,
                                "request_overhead_ms": 0.0})
    c = ServeClient(num_prompts=4, random_input_len=1000, random_output_len=8, max_concurrency=1)
    return float(run_client(c, dep, date="t", per_request=False)["median_ttft_ms"])


def test_unloaded_ttft_of_a_moe_model_is_the_host_floor():
    off, on = _ttft_ms(0.0), _ttft_ms(1425.0)
    assert off < 58 * 1.425  # the GPU's prefill of 1k tokens on 8 B200s is shorter than the launches
    # one request alone: its prompt step lasts the floor (plus its own first-token bookkeeping, if any)
    assert on == pytest.approx(58 * 1.425, rel=0.05)
    assert _ttft_ms(1425.0) == on  # deterministic


def test_ship_rule():
    before = {"ttft_p50": 33.7, "ttft_p99": 52.9, "tpot_itl": 18.9, "output_tps": 16.8}
    good = {**before, "ttft_p50": before["ttft_p50"] - MIN_TTFT_GAIN_PT - 0.1}
    assert ships(before, good) and shipped_value(before, good) == round(CITED_US_PER_MOE_LAYER)
    assert not ships(before, {**before, "ttft_p50": before["ttft_p50"] - 1.0})  # too small a gain
    assert not ships(before, {**good, "tpot_itl": before["tpot_itl"] + 1.5})  # decode rows pay for it
    assert not ships(before, {**good, "output_tps": before["output_tps"] + 1.5})
    assert not ships(before, {**good, "ttft_p99": before["ttft_p99"] + 2.5})
    assert shipped_value(before, before) == 0.0
