"""Gemma 4 in the catalog, and per-layer-type attention shapes (ModelSpec global_n_kv_heads, global_head_dim,
global_k_eq_v): the full-attention layers cache 4 KV heads of 512 and attend with 512-dim heads where the
sliding-window layers have 16 of 256 (31B)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from calibrate.serving import rows as serving_rows
from sim.catalog.engine_config import load_engine
from sim.catalog.models import ModelSpec, load_catalog
from sim.cost.roofline import CostModel

# text_config of the two config.json copies NVIDIA's aiconfigurator vendors, the keys that set shapes
# (ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce aic-core/src/aiconfigurator_core/model_configs/
# nvidia--Gemma-4-31B-IT-NVFP4_config.json and google--gemma-4-26B-A4B_config.json); layer_types: full_attention
# at 5, 11, ..., the last layer
_TYPES = lambda n: ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(n)]  # noqa: E731
GEMMA_4_31B = {
    "hidden_size": 5376, "num_hidden_layers": 60, "num_attention_heads": 32, "num_key_value_heads": 16,
    "head_dim": 256, "num_global_key_value_heads": 4, "global_head_dim": 512, "attention_k_eq_v": True,
    "intermediate_size": 21504, "vocab_size": 262144, "max_position_embeddings": 262144, "tie_word_embeddings": True,
    "sliding_window": 1024, "layer_types": _TYPES(60), "enable_moe_block": False, "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 0,
}
GEMMA_4_26B_A4B = {
    "hidden_size": 2816, "num_hidden_layers": 30, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 256, "num_global_key_value_heads": 2, "global_head_dim": 512, "attention_k_eq_v": True,
    "intermediate_size": 2112, "moe_intermediate_size": 704, "num_experts": 128, "top_k_experts": 8,
    "vocab_size": 262144, "max_position_embeddings": 262144, "tie_word_embeddings": True, "sliding_window": 1024,
    "layer_types": _TYPES(30), "enable_moe_block": True, "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
}


@pytest.mark.parametrize("name, c", [("gemma-4-31b", GEMMA_4_31B), ("gemma-4-26b-a4b", GEMMA_4_26B_A4B)])
def test_the_entries_are_what_their_config_json_says(name, c):
    m = load_catalog()[name]
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads, m.d_head) == (
        c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
    assert (m.global_n_kv_heads, m.global_head_dim, m.global_k_eq_v) == (
        c["num_global_key_value_heads"], c["global_head_dim"], c["attention_k_eq_v"])
    assert (m.n_sliding_layers, m.n_full_attention_layers) == (
        c["layer_types"].count("sliding_attention"), c["layer_types"].count("full_attention"))
    assert m.sliding_window == c["sliding_window"]
    assert (m.vocab_size, m.max_context, m.tie_embeddings, m.intermediate_size) == (
        c["vocab_size"], c["max_position_embeddings"], c["tie_word_embeddings"], c["intermediate_size"])
    # no Per-Layer Embeddings nor cross-layer KV sharing in these two (the E2B / E4B siblings have both)
    assert c["hidden_size_per_layer_input"] == 0 and c["num_kv_shared_layers"] == 0
    if c["enable_moe_block"]:
        assert (m.n_experts, m.n_experts_active, m.moe_intermediate_size) == (
            c["num_experts"], c["top_k_experts"], c["moe_intermediate_size"])
        # the dense MLP every layer runs beside its experts = shared experts of the routed width
        assert m.n_shared_experts * m.moe_intermediate_size == c["intermediate_size"]
    else:
        assert not m.is_moe


def test_parameter_counts_match_googles_published_sizes():
    """Google's model card: 31B = 30.7B parameters; 26B-A4B = 25.2B total, 3.8B active."""
    cat = load_catalog()
    assert cat["gemma-4-31b"].n_params_total / 1e9 == pytest.approx(30.7, rel=0.005)
    moe = cat["gemma-4-26b-a4b"]
    assert moe.n_params_total / 1e9 == pytest.approx(25.2, rel=0.005)
    assert moe.n_params_active / 1e9 == pytest.approx(3.8, rel=0.01)


def test_the_full_layers_q_k_o_weights_have_their_own_shape_and_no_v_proj():
    m, h = load_catalog()["gemma-4-31b"], 5376
    swa = h * 32 * 256 + 2 * h * 16 * 256 + 32 * 256 * h  # q, k, v, o of a sliding layer
    full = h * 32 * 512 + h * 4 * 512 + 32 * 512 * h  # q, k, o of a full layer: attention_k_eq_v, no v_proj
    assert m.mixer_params == 50 * swa + 10 * full
    assert m.model_copy(update={"global_k_eq_v": False}).mixer_params - m.mixer_params == 10 * h * 4 * 512


def test_kv_bytes_per_token_are_priced_per_layer_type():
    """50 sliding layers x K and V of 16 heads x 256 + 10 full layers x K and V of 4 heads x 512 (K = V shares
    the projection, not the cache: vLLM's gemma4.py caches K after k_norm + RoPE and V after v_norm)."""
    m = load_catalog()["gemma-4-31b"]
    for dtype, b in (("bf16", 2), ("fp8", 1)):
        assert m.kv_bytes_per_token(dtype) == (50 * 2 * 16 * 256 + 10 * 2 * 4 * 512) * b
    # the sliding layers hold at most the window
    assert m.kv_bytes_per_sequence(4096, "bf16") == 2 * (50 * 2 * 16 * 256 * 1024 + 10 * 2 * 4 * 512 * 4096)
    assert m.kv_bytes_per_sequence(512, "bf16") == 512 * m.kv_bytes_per_token("bf16")
    # attention FLOPs per decoded token: 4 H d per key, d = 256 in the sliding layers and 512 in the full ones
    assert m.attention_flops_per_token(4096) == 4 * 32 * (50 * 256 * 1024 + 10 * 512 * 4096)


def test_a_decode_step_reads_writes_and_attends_per_layer_type():
    cm = CostModel.from_names("gemma-4-31b", "bf16", "h100-sxm", "vllm")
    d = [300, 5000]
    b = cm.breakdown((), (), d)
    swa_tok, full_tok = 2 * 16 * 256 * 2, 2 * 4 * 512 * 2  # K/V bytes per token of a sliding / full layer (bf16)
    assert b["kv_read_bytes"] == pytest.approx(sum(50 * swa_tok * min(c, 1024) + 10 * full_tok * c for c in d))
    assert b["kv_write_bytes"] == pytest.approx(len(d) * (50 * swa_tok + 10 * full_tok))
    assert b["attention_flops"] == pytest.approx(sum(4 * 32 * (50 * 256 * min(c + 1, 1024) + 10 * 512 * (c + 1))
                                                     for c in d))
    # a prompt chunk's causal keys: 1000 tokens after 500 cached, sliding layers capped at the window
    p, c0 = 1000, 500
    keys_full = sum(c0 + t for t in range(1, p + 1))
    keys_swa = sum(min(c0 + t, 1024) for t in range(1, p + 1))
    bp = cm.breakdown((p,), (c0,), ())
    assert bp["attention_flops"] == pytest.approx(4 * 32 * (50 * 256 * keys_swa + 10 * 512 * keys_full))
    assert bp["kv_read_bytes"] == pytest.approx(50 * swa_tok * c0 + 10 * full_tok * c0)


def test_the_decode_run_closed_form_sums_the_weighted_steps():
    """The fast-forward's closed form (segments where a sequence reaches the window) equals the sum of its steps."""
    cm = CostModel.from_names("gemma-4-31b", "bf16", "h100-sxm", "vllm")
    d, k = np.array([1000, 40, 3000]), 60
    steps = sum(cm.step_time((), (), d + i) for i in range(k))
    assert cm.decode_run_time(d, k) == pytest.approx(steps, rel=1e-9)
    run = cm.decode_run_time(d, k)
    assert cm.decode_steps_within(d, run) == k and cm.decode_steps_within(d, run * (1 - 1e-9)) == k - 1


def test_same_shape_global_fields_reproduce_the_one_shape_pricing():
    """Global fields equal to the sliding layers' shape (the per-type path, float weights of 1) price Gemma 3 27B
    as the one-shape path does; unset, the weights are the integer 1 and the KV bytes the plain formula."""
    g3 = load_catalog()["gemma-3-27b"]
    assert g3.full_layer_weights == (1, 1) and g3.kv_bytes_per_token("bf16") == 62 * 2 * 16 * 128 * 2
    same = g3.model_copy(update={"global_n_kv_heads": 16, "global_head_dim": 128})
    assert same.has_global_shape and same.full_layer_weights == (1.0, 1.0)
    a, b = (CostModel.from_names(s, "bf16", "h100-sxm", "vllm") for s in (g3, same))
    for args in (((), (), [100, 2000]), ((700,), (300,), [50, 4000])):
        assert b.step_time(*args) == pytest.approx(a.step_time(*args), rel=1e-12)
    assert b.decode_run_time([100, 2000], 50) == pytest.approx(a.decode_run_time([100, 2000], 50), rel=1e-12)


def test_llamacpp_padded_views_and_speculative_paths_price_gemma_4():
    """The padded-view (llama.cpp) and speculative paths take the per-type weights too: finite, and more
    K/V read at a longer context only through the 10 full layers past the window."""
    eng = load_engine("llama.cpp")
    cm = CostModel.from_names("gemma-4-31b", "q4_k_m", "h100-sxm", eng)
    assert cm.kv_pad > 0
    short, long = cm.breakdown((), (), [2048]), cm.breakdown((), (), [4096])
    per_cell_full = cm.kv_read_bytes_per_layer_token * cm.full_kv_layers  # the 10 full layers, per cell
    assert long["kv_read_bytes"] - short["kv_read_bytes"] == pytest.approx(per_cell_full * (
        float(cm.padded_kv(4097)) - float(cm.padded_kv(2049))))
    assert np.isfinite(cm.decode_run_time([2048, 100], 300))
    from sim.cost.speculative import SpeculativeCostModel
    spec = SpeculativeCostModel(CostModel.from_names("gemma-4-31b", "bf16", "h100-sxm", "vllm"), k=3,
                                acceptance_rate=0.7, draft_cost_fraction=0.05)
    assert np.isfinite(spec.decode_run_time([500, 3000], 40)) and spec.decode_run_time([500, 3000], 40) > 0


def test_global_fields_need_sliding_gqa_layers():
    base = dict(n_layers=6, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128, vocab_size=100,
                max_context=1024)
    with pytest.raises(ValueError):
        ModelSpec(name="x", global_head_dim=32, **base)  # no sliding-window layers: nothing to differ from
    with pytest.raises(ValueError):
        ModelSpec(name="x", global_n_kv_heads=3, sliding_window=16, n_sliding_layers=5, **base)  # 4 % 3
    ok = ModelSpec(name="x", global_n_kv_heads=1, global_head_dim=32, sliding_window=16, n_sliding_layers=5, **base)
    assert ok.kv_bytes_per_token("bf16") == (5 * 2 * 2 * 16 + 1 * 2 * 1 * 32) * 2


def test_the_corpus_gemma_4_rows_resolve_to_the_entry():
    catalog = set(load_catalog())
    assert serving_rows.model_id("google/gemma-4-31B-it", catalog) == "gemma-4-31b"
    assert serving_rows.model_id("google/gemma-4-26B-A4B-it", catalog) == "gemma-4-26b-a4b"


def test_infersim_run_serves_gemma_4_31b_on_vllm():
    out = subprocess.run([sys.executable, "-c", "from sim.cli import console_main; console_main()", "run",
                          "workloads/examples/chat.jsonl", "--hw", "h100-sxm", "--model", "gemma-4-31b",
                          "--engine", "vllm"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "TTFT" in out.stdout and "200 done" in out.stdout


@pytest.mark.parametrize("name, c", [("gemma-4-31b", GEMMA_4_31B), ("gemma-4-26b-a4b", GEMMA_4_26B_A4B)])
def test_the_config_reader_reads_a_gemma_4_config_json_as_the_entry(tmp_path, name, c):
    """`--model path/config.json` of a Gemma 4 checkpoint (Gemma4ForConditionalGeneration, text_config) gives the
    catalog entry's shapes."""
    import json

    from sim.catalog.model_readers import spec_from_hf_config

    top = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "tie_word_embeddings": True,
           "text_config": {"model_type": "gemma4_text", "dtype": "bfloat16", **c}}
    (tmp_path / "config.json").write_text(json.dumps(top))
    read, entry = spec_from_hf_config(tmp_path), load_catalog()[name]
    for field in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "global_n_kv_heads",
                  "global_head_dim", "global_k_eq_v", "intermediate_size", "n_experts", "n_experts_active",
                  "moe_intermediate_size", "n_shared_experts", "vocab_size", "max_context", "tie_embeddings",
                  "sliding_window", "n_sliding_layers"):
        assert getattr(read, field) == getattr(entry, field), field
    assert read.kv_bytes_per_token("bf16") == entry.kv_bytes_per_token("bf16")


@pytest.mark.parametrize("key, value", [("hidden_size_per_layer_input", 256), ("num_kv_shared_layers", 20)])
def test_the_e2b_e4b_features_are_refused_by_name(tmp_path, key, value):
    import json

    from sim.catalog.model_readers import spec_from_hf_config
    from sim.errors import ConfigError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4", "text_config": {
        "model_type": "gemma4_text", **GEMMA_4_31B, key: value}}))
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == key and "not modelled" in str(e.value)


def test_tensor_parallel_gemma_4_prices_its_run_as_its_steps():
    """The placed (TP) path writes the new tokens' K/V per layer type too; its decode-run closed form sums its steps."""
    cm = CostModel.from_names("gemma-4-31b", "bf16", "h100-sxm", load_engine("vllm").with_overrides(tp=2))
    assert cm.placement is not None
    d, k = np.array([900, 2500]), 200
    steps = sum(cm.step_time((), (), d + i) for i in range(k))
    assert np.isfinite(steps) and cm.decode_run_time(d, k) == pytest.approx(steps, rel=1e-9)
    one = CostModel.from_names("gemma-4-31b", "bf16", "h100-sxm", "vllm")
    assert cm.step_time((), (), d) < one.step_time((), (), d)


def test_tensor_parallel_replicates_the_full_layers_few_kv_heads():
    """vLLM's gemma4.py: a rank caches max(1, K // tp) KV heads per layer, so at TP8 the 31B's sliding layers split
    their 16 heads 8 ways and its full layers' 4 heads are replicated (1 per rank, 4 ways); the KV bytes per rank
    add up per layer type."""
    from sim.cost.memory import device_memory_bytes
    from sim.cost.parallel import kv_tp_share

    m = load_catalog()["gemma-4-31b"]
    swa, full = 50 * 2 * 16 * 256, 10 * 2 * 4 * 512
    assert kv_tp_share(m, 8) == pytest.approx((swa * 2 / 16 + full * 1 / 4) / (swa + full))
    assert kv_tp_share(m, 4) == pytest.approx(1 / 4)  # both types split evenly
    (_, kv8), = device_memory_bytes(m, "bf16", "bf16", 1000, tp=8)
    assert kv8 == pytest.approx(1000 * 2 * (swa / 8 + full / 4))
    g3 = load_catalog()["gemma-3-27b"]  # one KV shape: the plain K // tp share
    assert kv_tp_share(g3, 32) == 1 / 16
