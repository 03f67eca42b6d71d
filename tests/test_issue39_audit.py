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
