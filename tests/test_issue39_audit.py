"""Gaps the issue 39 audit (docs/issue39-audit.md) found and closed: a model released in FP8 or MXFP4 runs
in that format on the engines that load a checkpoint as released, unless --quant says otherwise."""

from __future__ import annotations

import pytest

from sim.api import make_spec, resolve


@pytest.mark.parametrize("engine,model,expected", [
    ("vllm", "deepseek-r1", "fp8"),      # deepseek-ai/DeepSeek-R1 config.json: quantization_config fp8
    ("sglang", "kimi-k2", "fp8"),
    ("trtllm", "gpt-oss-120b", "mxfp4"),  # openai/gpt-oss-120b: quantization_config mxfp4
    ("vllm", "llama-3.1-8b", "bf16"),    # a 16-bit release keeps the engine's default
    ("llama.cpp", "deepseek-r1", "q4_k_m"),  # GGUF runtimes keep their own default
])
def test_a_release_format_is_the_default_quant_of_engines_that_load_it(engine, model, expected):
    spec = make_spec(trace="unused.jsonl", hw="h200", model=model, engine=engine)
    assert resolve(spec)[1].default_quant == expected


def test_an_explicit_quant_still_wins_over_the_release_format():
    spec = make_spec(trace="unused.jsonl", hw="h200", model="deepseek-r1", engine="vllm", quant="bf16")
    assert (spec.quant or resolve(spec)[1].default_quant) == "bf16"


def test_the_recurrent_layers_flops_per_token_by_hand():
    """Per-step FLOPs of the fixed-state layers (issue 39 target: each new architecture pinned by hand):
    ~6 FLOPs per recurrent-state element per token (sim.catalog.architectures.linear_flops_per_token)."""
    from sim.catalog.models import load_catalog
    from sim.cost.roofline import CostModel

    qn = load_catalog()["qwen3-next-80b-a3b"]
    # 36 Gated DeltaNet layers x 6 x (H_v d_k d_v recurrent state + (kernel - 1) x 2 H_k d_k conv q/k inputs)
    # = 36 x 6 x (32 x 128 x 128 + 3 x 2 x 16 x 128): the formula's state elements less the conv's value part
    assert qn.recurrent_flops_per_token == 36 * 6 * (32 * 128 * 128 + 3 * 2 * 16 * 128) == 115_900_416
    # a decode step prices them with the weight GEMMs: the compute term of 2 tokens grows by exactly them
    cm = CostModel.from_names(qn, "bf16", "h200", "vllm")
    with_state = cm.breakdown(decode_context=[100, 5000])["compute_s"]
    cm.recurrent_flops_per_token = 0.0
    without = cm.breakdown(decode_context=[100, 5000])["compute_s"]
    assert with_state > without
