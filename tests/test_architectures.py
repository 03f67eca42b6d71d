"""The 2026 architectures (issue 39): MLA, hybrid fixed-state layers, MoE with dense and shared layers,
MTP heads — KV bytes per token and per-step FLOPs/bytes pinned against hand calculations from each
config, the catalog models against their published sizes, and the readers' one-line refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_model_readers import LLAMA_META, llama_tensors, write_gguf

from sim.catalog.architectures import linear_state_elements, mla_flops_per_key
from sim.catalog.engine_config import load_engine
from sim.catalog.model_readers import spec_from_gguf, spec_from_hf_config
from sim.catalog.models import load_catalog
from sim.cost.memory import max_sequences
from sim.cost.roofline import CostModel
from sim.cost.speculative import SpeculativeCostModel, make_cost_model
from sim.engine.build import plan_kv
from sim.catalog.hardware import load_profile
from sim.errors import ConfigError

CAT = load_catalog()

# Published parameter counts (billions), total and active, as the vendors state them.
PUBLISHED_B = {
    "deepseek-v3": (671, 37),         # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated
    "deepseek-r1": (671, 37),         # DeepSeek-R1 card: 671B total, 37B activated
    "llama-4-scout": (109, 17),       # Meta: 17B active, 109B total (with the vision encoder)
    "llama-4-maverick": (400, 17),    # Meta: 17B active, 400B total
    "qwen3-32b": (32.8, None),        # Qwen3-32B card: 32.8B
    "qwen3-235b-a22b": (235, 22),     # Qwen3-235B-A22B card: 235B total, 22B activated
    "qwen3-next-80b-a3b": (80, None), # Qwen3-Next card: 80B total ("3B activated" counts no embeddings: below)
    "gemma-3-12b": (11.77, None),     # Gemma 3 report (arXiv 2503.19786) table 1: 1,012M embedding + 10,759M
    "gemma-3-27b": (27.02, None),     # ibid.: 1,416M embedding + 25,600M
    "glm-4.5": (355, None),           # Z.ai: 355B total (32B active: below)
    "glm-4.5-air": (106, None),       # Z.ai: 106B total (12B active: below)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_new_catalog_models_match_their_published_sizes_and_cite_a_config(name):
    m = CAT[name]
    total, active = PUBLISHED_B[name]
    assert any("config.json" in s for s in m.sources)
    assert m.n_params_total / 1e9 == pytest.approx(total, rel=0.015)
    if active is not None:
        assert m.n_params_active / 1e9 == pytest.approx(active, rel=0.03)


def test_published_counts_stated_loosely_or_without_embeddings():
    # Kimi K2 "1T total, 32B activated" (one significant digit on the total)
    assert CAT["kimi-k2"].n_params_total / 1e12 == pytest.approx(1.0, rel=0.05)
    assert CAT["kimi-k2"].n_params_active / 1e9 == pytest.approx(32, rel=0.05)
    # Mistral Small 3.1 "24B" includes its 0.4B vision encoder; the text model is 23.6B
    assert CAT["mistral-small-3.1-24b"].n_params_total / 1e9 == pytest.approx(24 - 0.4, rel=0.015)
    # GLM-4.5 / -Air and Qwen3-Next count their activated parameters without the vocabulary tensors
    for name, active in (("glm-4.5", 32), ("glm-4.5-air", 12), ("qwen3-next-80b-a3b", 3.3)):
        m = CAT[name]
        assert (m.n_params_active - m.embedding_params) / 1e9 == pytest.approx(active, rel=0.05), name


# ---- multi-head latent attention (DeepSeek-V3: r = 512, q_r = 1536, d_nope = 128, d_R = 64, d_v = 128, H = 128)

def test_mla_caches_one_latent_and_rope_key_per_token_per_layer():
    ds = CAT["deepseek-v3"]
    # 61 layers x (512 + 64) elements x 2 bytes: 70,272 B per token in bf16, half in fp8
    assert ds.kv_bytes_per_token("bf16") == 61 * 576 * 2 == 70_272
    assert ds.kv_bytes_per_token("fp8") == 35_136
    assert ds.kv_bytes_per_sequence(1000, "bf16") == 70_272_000
    # a GQA guess from num_key_value_heads = 128 and head_dim 56 would have been 2 x 61 x 128 x 56 x 2 = 1.75 MB
    assert ds.kv_bytes_per_token("bf16") < 2 * 61 * 128 * 56 * 2 / 20


def test_mla_projection_weights_by_hand():
    # q_a 7168x1536 + q_a_norm 1536 + q_b 1536x128x192 + kv_a 7168x576 + kv_a_norm 512 + kv_b 512x128x256 + o 128x128x7168
    by_hand = 11_010_048 + 1_536 + 37_748_736 + 4_128_768 + 512 + 16_777_216 + 117_440_512
    assert CAT["deepseek-v3"].attention_params_per_layer == by_hand == 187_107_328


def test_mla_attention_is_absorbed_in_decode_and_unabsorbed_in_a_prompt():
    m = CAT["deepseek-v3"].mla
    # decode: 2H(r + d_R) + 2H r = 2x128x576 + 2x128x512; prompt: 2H(d_nope + d_R) + 2H d_v = 2x128x192 + 2x128x128
    assert mla_flops_per_key(m, 128, absorbed=True) == 147_456 + 131_072 == 278_528
    assert mla_flops_per_key(m, 128, absorbed=False) == 49_152 + 32_768 == 81_920
    cm = CostModel.from_names("deepseek-v3", "fp8", "b200", "vllm")
    decode = cm.breakdown(decode_context=[1000])
    assert decode["attention_flops"] == pytest.approx(278_528 * 61 * 1001)
    prompt = cm.breakdown(prefill_tokens=[100], prefill_context=[0])
    assert prompt["attention_flops"] == pytest.approx(81_920 * 61 * 100 * 101 / 2)
    # K/V written: the latent of every new token in every layer, at the engine's KV dtype
    kv_bytes = load_engine("vllm").kv_dtype
    assert prompt["kv_write_bytes"] == pytest.approx(100 * CAT["deepseek-v3"].kv_bytes_per_token(kv_bytes))


# ---- MoE with leading dense layers and shared experts --------------------------------------------

def test_deepseek_moe_prices_58_expert_layers_and_3_dense_ones():
    ds = CAT["deepseek-v3"]
    expert = 3 * 7168 * 2048  # one expert's gate, up and down projections = 44,040,192
    assert ds.n_routed_layers == 58 and ds.routed_expert_params == 58 * 256 * expert
    # active: 58 x (8 routed + 1 shared) experts + 3 dense FFNs of 3 x 7168 x 18432, + routers
    ffn_active = 58 * (9 * expert + 7168 * 256) + 3 * 3 * 7168 * 18432
    assert ds.n_params_active == ds.mixer_params + ffn_active + 2 * 7168 * 61 + ds.embedding_params + 7168
    cm = CostModel.from_names("deepseek-v3", "fp8", "b200", "vllm")
    assert cm.expert_flops_per_row == 2 * 58 * expert


def test_llama4_maverick_alternates_moe_and_dense_layers():
    mv = CAT["llama-4-maverick"]
    assert mv.n_routed_layers == 24
    expert = 3 * 5120 * 8192
    assert mv.routed_expert_params == 24 * 128 * expert
    # active FFN: 24 x (1 routed + 1 shared) + 24 dense layers of 3 x 5120 x 16384
    assert mv._ffn_params(1) == 24 * (2 * expert + 5120 * 128) + 24 * 3 * 5120 * 16384


# ---- hybrid layers with a fixed-size state (Qwen3-Next: 36 Gated DeltaNet + 12 gated-attention layers)

def test_qwen3_next_caches_kv_in_12_layers_and_a_context_independent_state_in_36():
    qn = CAT["qwen3-next-80b-a3b"]
    assert qn.n_attention_layers == 12
    assert qn.kv_bytes_per_token("bf16") == 12 * 2 * 2 * 256 * 2 == 24_576
    # per layer: H_v d_k d_v = 32 x 128 x 128 recurrent state + (4 - 1) x (2 x 16 x 128 + 32 x 128) conv inputs
    per_layer = 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)
    assert linear_state_elements(qn.linear_attention) == per_layer == 548_864
    assert qn.state_bytes_per_sequence("bf16") == 36 * per_layer * 2 == 39_518_208
    assert qn.state_bytes_per_sequence("fp8") == qn.state_bytes_per_sequence("bf16")  # state stays 16-bit
    for c in (1, 1000, 100_000):
        assert qn.kv_bytes_per_sequence(c, "bf16") == 24_576 * c + 39_518_208


def test_a_hybrid_step_reads_and_writes_each_sequences_state_once():
    cm = CostModel.from_names("qwen3-next-80b-a3b", "bf16", "h200", "vllm")
    kv = load_engine("vllm").kv_dtype
    state = CAT["qwen3-next-80b-a3b"].state_bytes_per_sequence(kv)
    b = cm.breakdown(decode_context=[100, 5000, 20000])
    assert b["recurrent_state_bytes"] == pytest.approx(2 * state * 3)
    # only the 12 attention layers read K/V: 12 x (100 + 5000 + 20000) tokens
    assert b["kv_read_bytes"] == pytest.approx(CAT["qwen3-next-80b-a3b"].kv_bytes_per_token(kv) * 25_100)
    # an attention-only model pays no state traffic
    assert CostModel.from_names("qwen3-30b-a3b", "bf16", "h200", "vllm").breakdown(
        decode_context=[100])["recurrent_state_bytes"] == 0


def test_fit_and_the_kv_allocator_reserve_the_fixed_state_per_sequence():
    qn, kv = CAT["qwen3-next-80b-a3b"], "bf16"
    budget = 10e9
    # 10 GB holds floor(10e9 / (24,576 x 4,096 + 39,518,208)) = 71 sequences of 4k tokens
    assert max_sequences(qn, budget, kv, 4096) == int(budget // (24_576 * 4096 + 39_518_208)) == 71
    eng = load_engine("vllm")
    plan = plan_kv(load_profile("h200"), qn, "fp8", eng)
    assert plan.activation_reserve_bytes >= qn.state_bytes_per_sequence(eng.kv_dtype) * eng.max_num_seqs


# ---- MTP heads as built-in speculative decoding ----------------------------------------------------

def test_mtp_drafts_with_one_extra_layer_at_its_share_of_a_decode_step():
    ds = CAT["deepseek-v3"]
    expert = 3 * 7168 * 2048
    draft = 187_107_328 + 9 * expert + 7168 * 256 + 2 * 7168 * 7168 + 129_280 * 7168
    assert ds.mtp_draft_cost_fraction() == pytest.approx(draft / ds.matmul_params_active)
    eng = load_engine("vllm").with_overrides(speculative={"method": "mtp", "k": 1, "acceptance_rate": 0.85})
    cm = make_cost_model("b200", "deepseek-v3", "fp8", eng)
    assert isinstance(cm, SpeculativeCostModel)
    assert cm.draft_cost_fraction == pytest.approx(draft / ds.matmul_params_active)
    assert cm.extra_weight_bytes == pytest.approx(ds.mtp_params())  # fp8: one byte per weight
    with pytest.raises(ConfigError, match="no multi-token-prediction") as e:
        make_cost_model("h100-sxm", "llama-3.1-8b", "bf16", eng)
    assert e.value.field == "speculative.method"


# ---- readers --------------------------------------------------------------------------------------

DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1, "vocab_size": 129280,
    "tie_word_embeddings": False, "quantization_config": {"quant_method": "fp8"}, "torch_dtype": "bfloat16",
}


def test_a_deepseek_v3_config_json_reads_as_the_catalog_entry(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    m = spec_from_hf_config(tmp_path)
    ref = CAT["deepseek-v3"]
    assert m.mla == ref.mla and m.n_moe_layers == 58 and m.mtp_layers == 1 and m.default_quant == "fp8"
    assert m.n_params_total == ref.n_params_total
    assert m.kv_bytes_per_token("bf16") == 70_272


def test_a_qwen3_next_config_json_reads_its_linear_attention_layers(tmp_path):
    cfg = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
           "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512, "num_experts": 512, "num_experts_per_tok": 10,
           "vocab_size": 151936, "max_position_embeddings": 262144, "full_attention_interval": 4,
           "linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1,
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = spec_from_hf_config(tmp_path)
    assert m.linear_attention == CAT["qwen3-next-80b-a3b"].linear_attention
    assert m.n_params_total == CAT["qwen3-next-80b-a3b"].n_params_total
    assert m.kv_bytes_per_token("bf16") == 24_576


def test_a_mamba2_hybrid_config_prices_its_state_not_a_kv_cache(tmp_path):
    # Granite 4.0-H style: layer_types of mamba / attention; Mamba-2 state H x P x N per layer
    types = (["mamba"] * 9 + ["attention"]) * 4
    cfg = {"model_type": "granitemoehybrid", "hidden_size": 1536, "num_hidden_layers": 40, "num_attention_heads": 12,
           "num_key_value_heads": 4, "intermediate_size": 512, "num_local_experts": 0, "vocab_size": 100352,
           "max_position_embeddings": 131072, "layer_types": types, "mamba_n_heads": 48, "mamba_d_head": 64,
           "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = spec_from_hf_config(tmp_path)
    assert (m.n_attention_layers, m.n_linear_layers) == (4, 36)
    assert m.kv_bytes_per_token("bf16") == 4 * 2 * 4 * 128 * 2
    per_layer = 48 * 64 * 128 + 3 * (48 * 64 + 2 * 1 * 128)
    assert m.state_bytes_per_sequence("bf16") == 36 * per_layer * 2


def test_a_config_of_an_unmodelled_architecture_is_one_error_naming_the_field(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "minimax_m1", "num_hidden_layers": 80}))
    with pytest.raises(ConfigError, match="unsupported model_type 'minimax_m1'") as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == "model_type"
    bad = dict(DEEPSEEK_V3_CONFIG)
    del bad["qk_rope_head_dim"]
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == "qk_rope_head_dim"


def test_a_gguf_with_recurrent_state_layers_is_refused_not_priced_as_gqa(tmp_path):
    """Plain Mamba / Mamba-2 (llama.cpp writes head_count 0 and feed_forward_length 0: no attention layer at
    all) and hybrids not modelled from a GGUF header (Falcon-H1) are one error naming the field."""
    path = tmp_path / "ssm.gguf"
    for arch in ("mamba", "mamba2"):
        write_gguf(path, arch, {**LLAMA_META, "attention.head_count": 0, "feed_forward_length": 0,
                                "ssm.state_size": 128, "ssm.conv_kernel": 4, "ssm.inner_size": 128,
                                "ssm.time_step_rank": 2}, llama_tensors())
        with pytest.raises(ConfigError, match="no attention layers") as e:
            spec_from_gguf(path)
        assert e.value.field == f"{arch}.attention.head_count"
    write_gguf(path, "falcon-h1", {**LLAMA_META, "ssm.state_size": 128, "ssm.conv_kernel": 4}, llama_tensors())
    with pytest.raises(ConfigError, match="not modelled from a GGUF header") as e:
        spec_from_gguf(path)
    assert e.value.field.startswith("falcon-h1.ssm.")


# Jamba v0.1 (ai21labs/Jamba-v0.1 config.json): 32 layers, attention every 8th from offset 4, experts every 2nd
# from offset 1, Mamba d_state 16, d_conv 4, expand 2, dt_rank 256
JAMBA_CONFIG = {"model_type": "jamba", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_experts": 16, "num_experts_per_tok": 2,
                "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2, "expert_layer_offset": 1,
                "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256,
                "vocab_size": 65536, "max_position_embeddings": 262144, "tie_word_embeddings": False}


def test_a_jamba_gguf_reads_its_mamba_layers_as_the_config_json_does(tmp_path):
    """The keys llama.cpp's JambaModel writes: ssm.inner_size = expand x hidden, ssm.time_step_rank = dt_rank,
    head_count_kv per layer (0 on the Mamba layers); the MoE layers from the `ffn_*_exps` tensors."""
    c = JAMBA_CONFIG
    (tmp_path / "config.json").write_text(json.dumps(c))
    ref = spec_from_hf_config(tmp_path)
    attn = [i % 8 == 4 for i in range(32)]
    meta = {**LLAMA_META, "block_count": 32, "embedding_length": 4096, "attention.head_count": 32,
            "attention.head_count_kv": [8 if a else 0 for a in attn], "feed_forward_length": 14336,
            "context_length": 262144, "vocab_size": 65536, "expert_count": 16, "expert_used_count": 2,
            "ssm.conv_kernel": 4, "ssm.inner_size": 2 * 4096, "ssm.state_size": 16, "ssm.time_step_rank": 256}
    experts = {f"blk.{i}.ffn_{w}_exps.weight": np.zeros((2, 2), np.float16)
               for i in range(1, 32, 2) for w in ("gate", "up", "down")}
    path = tmp_path / "jamba.gguf"
    write_gguf(path, "jamba", meta, {**llama_tensors(), **experts})
    m = spec_from_gguf(path)
    assert m.linear_attention == ref.linear_attention
    assert (m.n_attention_layers, m.n_linear_layers, m.n_routed_layers) == (4, 28, 16) == (
        ref.n_attention_layers, ref.n_linear_layers, ref.n_routed_layers)
    # hand calculation: 4 attention layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes
    assert m.kv_bytes_per_token("bf16") == 4 * 2 * 8 * 128 * 2 == ref.kv_bytes_per_token("bf16") == 16_384
    # 28 Mamba layers x (8192 inner x 16 state + 3 x 8192 conv) elements x 2 bytes
    assert m.state_bytes_per_sequence("bf16") == 28 * (8192 * 16 + 3 * 8192) * 2 == 8_716_288
    assert m.state_bytes_per_sequence("bf16") == ref.state_bytes_per_sequence("bf16")
    assert m.recurrent_flops_per_token == ref.recurrent_flops_per_token > 0
    assert m.n_params_total == ref.n_params_total
    write_gguf(path, "jamba", meta, llama_tensors())  # experts stated, no expert tensors: refused
    with pytest.raises(ConfigError) as e:
        spec_from_gguf(path)
    assert e.value.field == "jamba.expert_count"


def test_a_nemotron_h_gguf_reads_its_blocks_as_the_config_json_does(tmp_path):
    """The keys llama.cpp's NemotronHModel writes: one block per hybrid_override_pattern character,
    head_count_kv > 0 on `*`, feed_forward_length > 0 on `-`, Mamba-2 shapes as ssm.* (time_step_rank =
    mamba_num_heads, inner_size = heads x head dim)."""
    pattern = "M-M*-M-M-"
    cfg = {"model_type": "nemotron_h", "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 8192,
           "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
           "tie_word_embeddings": False, "num_hidden_layers": 9, "hybrid_override_pattern": pattern}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ref = spec_from_hf_config(tmp_path)
    meta = {**LLAMA_META, "block_count": 9, "embedding_length": 4096, "attention.head_count": 32,
            "attention.head_count_kv": [8 if c == "*" else 0 for c in pattern], "attention.key_length": 128,
            "feed_forward_length": [21504 if c == "-" else 0 for c in pattern], "context_length": 8192,
            "vocab_size": 131072, "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 8,
            "ssm.inner_size": 128 * 64, "ssm.time_step_rank": 128}
    path = tmp_path / "nemotron_h.gguf"
    write_gguf(path, "nemotron_h", meta, llama_tensors(gate=False))
    m = spec_from_gguf(path)
    assert m.linear_attention == ref.linear_attention
    assert (m.n_layers, m.n_attention_layers, m.n_linear_layers, m.n_ffn_layers, m.gated_mlp) == (5, 1, 4, 4, False)
    assert m._ffn_params(0) == ref._ffn_params(0) == 4 * 2 * 4096 * 21504
    assert m.kv_bytes_per_token("bf16") == 1 * 2 * 8 * 128 * 2 == ref.kv_bytes_per_token("bf16")
    # 4 Mamba-2 layers x (128 heads x 64 x 128 state + 3 x (8192 + 2 x 8 groups x 128) conv) elements x 2 bytes
    assert m.state_bytes_per_sequence("bf16") == 4 * (128 * 64 * 128 + 3 * (8192 + 2 * 8 * 128)) * 2
    assert m.state_bytes_per_sequence("bf16") == ref.state_bytes_per_sequence("bf16")
    assert m.n_params_total == ref.n_params_total
    write_gguf(path, "nemotron_h", {**meta, "feed_forward_length": 21504}, llama_tensors(gate=False))
    with pytest.raises(ConfigError) as e:
        spec_from_gguf(path)
    assert e.value.field == "nemotron_h.feed_forward_length"


def test_a_qwen3next_gguf_reads_its_gated_deltanet_layers_as_the_config_json_does(tmp_path):
    """The keys llama.cpp's converter writes for Qwen3-Next (ssm.* from the linear_* config fields,
    full_attention_interval, the shared expert's width): the same layer kinds, state and KV as the catalog
    entry read from config.json; the converter drops the MTP layer, so the GGUF has none."""
    path = tmp_path / "qwen3next.gguf"
    meta = {**LLAMA_META, "block_count": 48, "embedding_length": 2048, "attention.head_count": 16,
            "attention.head_count_kv": 2, "attention.key_length": 256, "attention.value_length": 256,
            "feed_forward_length": 5120, "context_length": 262144, "expert_count": 512, "expert_used_count": 10,
            "expert_feed_forward_length": 512, "expert_shared_feed_forward_length": 512,
            "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 16, "ssm.time_step_rank": 32,
            "ssm.inner_size": 4096, "full_attention_interval": 4}
    write_gguf(path, "qwen3next", meta, llama_tensors())
    m, ref = spec_from_gguf(path), CAT["qwen3-next-80b-a3b"]
    assert m.linear_attention == ref.linear_attention
    assert (m.n_attention_layers, m.n_linear_layers, m.n_shared_experts, m.mtp_layers) == (12, 36, 1, 0)
    # hand calculation: 12 full-attention layers x 2 (K, V) x 2 KV heads x 256 x 2 bytes
    assert m.kv_bytes_per_token("bf16") == 12 * 2 * 2 * 256 * 2 == 24_576
    # 36 layers x (32 x 128 x 128 state + 3 x (2 x 16 x 128 + 32 x 128) conv) elements x 2 bytes
    assert m.state_bytes_per_sequence("bf16") == 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert m.state_bytes_per_sequence("bf16") == ref.state_bytes_per_sequence("bf16")
    assert m.attention_flops_per_token(4096) == ref.attention_flops_per_token(4096)
    write_gguf(path, "qwen3next", {**meta, "expert_shared_feed_forward_length": 1024}, llama_tensors())
    with pytest.raises(ConfigError) as e:
        spec_from_gguf(path)
    assert e.value.field == "qwen3next.expert_shared_feed_forward_length"


def test_a_granitehybrid_gguf_reads_its_mamba2_layers_as_the_config_json_does(tmp_path):
    """Granite 4.0-H style, the numbers of the config.json test above: llama.cpp writes the Mamba-2 shapes as
    ssm.* keys and attention.head_count_kv per layer (0 on the 36 Mamba-2 layers)."""
    path = tmp_path / "granite.gguf"
    types = (["mamba"] * 9 + ["attention"]) * 4
    meta = {**LLAMA_META, "block_count": 40, "embedding_length": 1536, "attention.head_count": 12,
            "attention.head_count_kv": [4 if t == "attention" else 0 for t in types], "feed_forward_length": 512,
            "context_length": 1048576, "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 1,
            "ssm.inner_size": 48 * 64, "ssm.time_step_rank": 48}
    write_gguf(path, "granitehybrid", meta, llama_tensors())
    m = spec_from_gguf(path)
    assert (m.n_attention_layers, m.n_linear_layers, m.n_kv_heads) == (4, 36, 4)
    assert m.kv_bytes_per_token("bf16") == 4 * 2 * 4 * 128 * 2
    per_layer = 48 * 64 * 128 + 3 * (48 * 64 + 2 * 1 * 128)
    assert m.state_bytes_per_sequence("bf16") == 36 * per_layer * 2
    write_gguf(path, "granitehybrid", {**meta, "attention.head_count_kv": 4}, llama_tensors())
    with pytest.raises(ConfigError) as e:
        spec_from_gguf(path)
    assert e.value.field == "granitehybrid.attention.head_count_kv"


def test_a_deepseek2_gguf_reads_mla_from_its_kv_lora_rank(tmp_path):
    path = tmp_path / "ds.gguf"
    meta = {**LLAMA_META, "attention.kv_lora_rank": 16, "attention.q_lora_rank": 24, "attention.key_length": 24,
            "attention.value_length": 16, "rope.dimension_count": 8, "expert_count": 4, "expert_used_count": 2,
            "expert_feed_forward_length": 32, "leading_dense_block_count": 1, "nextn_predict_layers": 1}
    write_gguf(path, "deepseek2", meta, llama_tensors())
    m = spec_from_gguf(path)
    assert (m.mla.kv_lora_rank, m.mla.qk_nope_head_dim, m.mla.qk_rope_head_dim, m.mla.v_head_dim) == (16, 16, 8, 16)
    assert (m.n_moe_layers, m.mtp_layers) == (1, 1)
    assert m.kv_bytes_per_token("fp16") == 2 * (16 + 8) * 2
    assert np.isfinite(m.attention_flops_per_token(100))


def test_an_mla_cache_is_whole_on_every_tensor_parallel_rank():
    """The latent is shared by all heads: TP cannot split it (vLLM replicates it on each rank), where GQA's
    8 KV heads split 8 ways."""
    from sim.cost.memory import device_memory_bytes

    ds, llama = CAT["deepseek-v3"], CAT["llama-3.1-70b"]
    assert device_memory_bytes(ds, "fp8", "bf16", 1000, tp=8)[0][1] == pytest.approx(1000 * 70_272)
    assert device_memory_bytes(llama, "fp8", "bf16", 1000, tp=8)[0][1] == pytest.approx(
        1000 * llama.kv_bytes_per_token("bf16") / 8)
    # and every rank reads all of it in a decode step
    cm = CostModel.from_names("deepseek-v3", "fp8", "h200", load_engine("vllm").with_overrides(tp=8))
    assert cm.placement.parts[0].kv_factor == 8


def test_a_tensor_parallel_mla_prompt_is_priced_at_the_unabsorbed_rate():
    cm = CostModel.from_names("deepseek-v3", "fp8", "h200", load_engine("vllm").with_overrides(tp=8))
    t, n, keys, kv_read, dkeys = cm._aggregate([8192], [0], [])
    at_decode_rate = float(cm.placed_time(t, 1, keys, kv_read, logits=n))
    assert cm.step_time([8192], [0], []) < at_decode_rate


@pytest.mark.parametrize("name,cfg", [
    ("llama-4-maverick", {"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
        "max_position_embeddings": 1048576, "attention_chunk_size": 8192, "tie_word_embeddings": False}}),
    ("glm-4.5-air", {"model_type": "glm4_moe", "hidden_size": 4096, "intermediate_size": 10944,
                     "moe_intermediate_size": 1408, "num_hidden_layers": 46, "num_attention_heads": 96,
                     "num_key_value_heads": 8, "head_dim": 128, "attention_bias": True, "n_routed_experts": 128,
                     "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
                     "num_nextn_predict_layers": 1, "vocab_size": 151552, "max_position_embeddings": 131072,
                     "tie_word_embeddings": False}),
    ("kimi-k2", {**DEEPSEEK_V3_CONFIG, "model_type": "kimi_k2", "num_attention_heads": 64, "num_key_value_heads": 64,
                 "n_routed_experts": 384, "first_k_dense_replace": 1, "vocab_size": 163840,
                 "max_position_embeddings": 131072, "num_nextn_predict_layers": 0}),
])
def test_config_json_of_each_new_family_reads_as_its_catalog_entry(tmp_path, name, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m, ref = spec_from_hf_config(tmp_path), CAT[name]
    assert (m.n_params_total, m.n_params_active) == (ref.n_params_total, ref.n_params_active)
    assert m.kv_bytes_per_sequence(50_000, "bf16") == ref.kv_bytes_per_sequence(50_000, "bf16")
    assert (m.n_routed_layers, m.mtp_layers) == (ref.n_routed_layers, ref.mtp_layers)


def test_nemotron_h_counts_its_mixer_and_mlp_blocks_and_refuses_unknown_ones(tmp_path):
    base = {"model_type": "nemotron_h", "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 8192,
            "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
            "tie_word_embeddings": False}
    # Nemotron-H's own layout: an attention block may follow a Mamba block with no MLP between
    (tmp_path / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 9,
                                                      "hybrid_override_pattern": "M-M*-M-M-"}))
    m = spec_from_hf_config(tmp_path)
    assert (m.n_layers, m.n_attention_layers, m.n_linear_layers, m.n_ffn_layers, m.gated_mlp) == (5, 1, 4, 4, False)
    assert m._ffn_params(0) == 4 * 2 * 4096 * 21504  # squared-ReLU MLPs: up and down only
    assert m.kv_bytes_per_token("bf16") == 1 * 2 * 8 * 128 * 2
    (tmp_path / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 6,
                                                      "hybrid_override_pattern": "MEM*E-"}))
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    assert e.value.field == "hybrid_override_pattern"


def test_expert_parallelism_waits_for_the_busiest_rank_and_evens_out_with_the_batch():
    from sim.cost.parallel import expert_parallel_imbalance

    # 8 of 256 experts over 8 ranks: mean 1, variance 8 x 1/8 x 7/8 x 248/255, max ~ 1 + sigma sqrt(2 ln 8)
    sigma = (8 * (1 / 8) * (7 / 8) * 248 / 255) ** 0.5
    assert expert_parallel_imbalance(8, 256, 8) == pytest.approx(1 + sigma * (2 * np.log(8)) ** 0.5)
    assert expert_parallel_imbalance(256, 256, 8) == pytest.approx(1.0)  # every expert touched: balanced
    # no per-layer floor: at one sequence vLLM's shipped 150 us floor (61 layers, 9.2 ms) would hide the busiest rank
    tp = load_engine("vllm").with_overrides(tp=8, layer_floor_us=0)
    ep = tp.with_overrides(expert_parallel=True)
    split = CostModel.from_names("deepseek-v3", "fp8", "h200", tp)
    whole = CostModel.from_names("deepseek-v3", "fp8", "h200", ep)
    one, many = [4096], [4096] * 512
    assert whole.step_time((), (), one) > split.step_time((), (), one) * 1.2   # one sequence: ~3 experts on one rank
    assert whole.step_time((), (), many) == pytest.approx(split.step_time((), (), many), rel=0.05)
    # a dense model is unaffected
    assert CostModel.from_names("llama-3.1-70b", "fp8", "h200", ep).step_time((), (), one) == CostModel.from_names(
        "llama-3.1-70b", "fp8", "h200", tp).step_time((), (), one)
