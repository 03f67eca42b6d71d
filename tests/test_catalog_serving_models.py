"""The serving corpus's models (issue 38): each catalog entry's KV bytes per token, fixed state per
sequence and the weight bytes one decode step streams, pinned against hand calculations from its
config.json; the published sizes; the config.json reader for the same families; the HF ids the
corpus names resolving to catalog entries (`hf_repos`)."""

from __future__ import annotations

import json

import pytest

from calibrate.serving.rows import MODEL_ALIASES, load_corpus, model_id
from sim.catalog.hf_config import spec_from_hf_config
from sim.catalog.models import load_catalog
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

CAT = load_catalog()
BF16 = 2  # bytes per weight and per cached element


def step_bytes(name: str, quant: str = "bf16") -> float:
    """Weight bytes the cost model streams for one sequence's decode step (one new token)."""
    return CostModel.from_names(name, quant, "h200", "vllm").breakdown(decode_context=[1000])["weight_bytes"]


def gqa(h, heads, kv, d, gate=False):
    """q (x2 with an output gate), k, v, o projections of one attention layer."""
    return h * heads * d * (2 if gate else 1) + 2 * h * kv * d + heads * d * h


def gdn(h, hk, hv, dk, dv, kernel=4):
    """One Gated DeltaNet layer: in_proj_qkvz + in_proj_ba + conv1d + out_proj + A_log, dt_bias + norm."""
    key, val = hk * dk, hv * dv
    return h * (2 * key + 2 * val) + 2 * h * hv + kernel * (2 * key + val) + val * h + 2 * hv + dv


def mla(h, heads, r, q_r, nope, rope, v):
    """q (q_a + norm + q_b, or one q_proj), kv_a + norm, kv_b, o of one MLA layer."""
    q = (h * q_r + q_r + q_r * heads * (nope + rope)) if q_r else h * heads * (nope + rope)
    return q + h * (r + rope) + r + r * heads * (nope + v) + heads * v * h


# ---- GQA MoE: MiniMax-M2 / M2.5 (62 layers, h 3072, 48/8 heads of 128, 256 experts of 1536, top 8) ----

def test_minimax_m2_kv_and_step_bytes_by_hand():
    for name in ("minimax-m2.5", "minimax-m2"):
        m = CAT[name]
        assert m.kv_bytes_per_token("bf16") == 62 * 2 * 8 * 128 * BF16 == 253_952
        assert m.kv_bytes_per_token("fp8") == 126_976
        expert = 3 * 3072 * 1536                       # 14,155,776
        layer = gqa(3072, 48, 8, 128) + 256 * expert + 3072 * 256  # attention + experts + router
        total = 62 * layer + 2 * 3072 * 62 + 2 * 200064 * 3072 + 3072
        assert m.n_params_total == total == 228_689_304_576
        # one token: everything but the input embedding and the 248 experts it is not routed to
        one_token = BF16 * (total - 200064 * 3072 - 62 * 248 * expert)
        assert one_token == 20_830_992_384 and step_bytes(name) == pytest.approx(one_token, rel=1e-12)


# ---- hybrid Gated DeltaNet + gated attention MoE: Qwen3.5 ---------------------------------------------

def test_qwen35_397b_caches_kv_in_15_layers_and_a_state_in_45_by_hand():
    m = CAT["qwen3.5-397b-a17b"]
    assert (m.n_attention_layers, m.n_linear_layers) == (15, 45)
    assert m.kv_bytes_per_token("bf16") == 15 * 2 * 2 * 256 * BF16 == 30_720
    per_layer = 64 * 128 * 128 + 3 * (2 * 16 * 128 + 64 * 128)  # H_v d_k d_v + (4 - 1)(2 H_k d_k + H_v d_v)
    assert m.state_bytes_per_sequence("bf16") == 45 * per_layer * BF16 == 97_689_600
    assert m.kv_bytes_per_sequence(8192, "bf16") == 30_720 * 8192 + 97_689_600
    expert = 3 * 4096 * 1024
    moe = 512 * expert + expert + 4096 * 512  # routed + one shared expert of the same width + router
    total = (15 * gqa(4096, 32, 2, 256, gate=True) + 45 * gdn(4096, 16, 64, 128, 128) + 60 * moe
             + 2 * 4096 * 60 + 2 * 248320 * 4096 + 4096)
    assert m.n_params_total == total
    assert step_bytes("qwen3.5-397b-a17b") == pytest.approx(
        BF16 * (total - 248320 * 4096 - 60 * 502 * expert), rel=1e-12)


def test_qwen35_35b_by_hand():
    m = CAT["qwen3.5-35b-a3b"]
    assert m.kv_bytes_per_token("bf16") == 10 * 2 * 2 * 256 * BF16 == 20_480
    assert m.state_bytes_per_sequence("bf16") == 30 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * BF16
    expert = 3 * 2048 * 512
    total = (10 * gqa(2048, 16, 2, 256, gate=True) + 30 * gdn(2048, 16, 32, 128, 128)
             + 40 * (257 * expert + 2048 * 256) + 2 * 2048 * 40 + 2 * 248320 * 2048 + 2048)
    assert m.n_params_total == total
    assert step_bytes("qwen3.5-35b-a3b") == pytest.approx(BF16 * (total - 248320 * 2048 - 40 * 248 * expert), rel=1e-12)


def test_qwen3_coder_next_is_qwen3_next_without_mtp():
    m, ref = CAT["qwen3-coder-next"], CAT["qwen3-next-80b-a3b"]
    assert m.kv_bytes_per_token("bf16") == 12 * 2 * 2 * 256 * BF16 == 24_576
    assert m.state_bytes_per_sequence("bf16") == ref.state_bytes_per_sequence("bf16") == 39_518_208
    assert m.n_params_total == ref.n_params_total and m.mtp_layers == 0 and ref.mtp_layers == 1
    expert = 3 * 2048 * 512
    assert step_bytes("qwen3-coder-next") == pytest.approx(
        BF16 * (m.n_params_total - 151936 * 2048 - 48 * 502 * expert), rel=1e-12)


# ---- plain GQA: Llama 3.1 405B, Qwen3-Coder-480B ---------------------------------------------------------

def test_llama_405b_by_hand():
    m = CAT["llama-3.1-405b"]
    assert m.kv_bytes_per_token("bf16") == 126 * 2 * 8 * 128 * BF16 == 516_096
    total = 126 * (gqa(16384, 128, 8, 128) + 3 * 16384 * 53248 + 2 * 16384) + 2 * 128256 * 16384 + 16384
    assert m.n_params_total == total
    assert step_bytes("llama-3.1-405b") == pytest.approx(BF16 * (total - 128256 * 16384), rel=1e-12)


def test_qwen3_coder_480b_by_hand():
    m = CAT["qwen3-coder-480b-a35b"]
    assert m.kv_bytes_per_token("bf16") == 62 * 2 * 8 * 128 * BF16 == 253_952
    expert = 3 * 6144 * 2560
    total = 62 * (gqa(6144, 96, 8, 128) + 160 * expert + 6144 * 160 + 2 * 6144) + 2 * 151936 * 6144 + 6144
    assert m.n_params_total == total
    assert step_bytes("qwen3-coder-480b-a35b") == pytest.approx(
        BF16 * (total - 151936 * 6144 - 62 * 152 * expert), rel=1e-12)


# ---- MLA: GLM-4.7-Flash; shared experts + a dense first layer: ERNIE 4.5 ----------------------------------

def test_glm_47_flash_caches_one_latent_per_token_by_hand():
    m = CAT["glm-4.7-flash"]
    assert m.kv_bytes_per_token("bf16") == 47 * (512 + 64) * BF16 == 54_144  # latent + RoPE key, not 2 x 20 heads
    expert = 3 * 2048 * 1536
    total = (47 * mla(2048, 20, 512, 768, 192, 64, 256) + 46 * (65 * expert + 2048 * 64) + 3 * 2048 * 10240
             + 2 * 2048 * 47 + 2 * 154880 * 2048 + 2048)
    assert m.n_params_total == total
    assert step_bytes("glm-4.7-flash") == pytest.approx(BF16 * (total - 154880 * 2048 - 46 * 60 * expert), rel=1e-12)


def test_ernie_45_21b_by_hand():
    m = CAT["ernie-4.5-21b-a3b"]
    assert m.kv_bytes_per_token("bf16") == 28 * 2 * 4 * 128 * BF16 == 57_344
    expert = 3 * 2560 * 1536
    # 27 MoE layers of 64 routed + 2 shared experts + router, 1 dense layer, one tied vocabulary table
    total = (28 * gqa(2560, 20, 4, 128) + 27 * (66 * expert + 2560 * 64) + 3 * 2560 * 12288 + 2 * 2560 * 28
             + 103424 * 2560 + 2560)
    assert m.n_params_total == total
    # tied: the table is streamed once, as the LM head
    assert step_bytes("ernie-4.5-21b-a3b") == pytest.approx(BF16 * (total - 27 * 58 * expert), rel=1e-12)


# ---- sliding windows: Gemma 3 4B (34 layers, 29 of them in a 1,024-token window) ------------------------

def test_gemma3_4b_caches_a_window_in_29_layers_by_hand():
    m = CAT["gemma-3-4b"]
    per_layer_token = 2 * 4 * 256 * BF16  # K and V of 4 KV heads of 256
    assert m.kv_bytes_per_token("bf16") == 34 * per_layer_token == 139_264  # what a window-blind allocator holds
    assert m.kv_bytes_per_sequence(4096, "bf16") == (5 * 4096 + 29 * 1024) * per_layer_token == 205_520_896
    total = 34 * (gqa(2560, 8, 4, 256) + 3 * 2560 * 10240 + 2 * 2560) + 262208 * 2560 + 2560
    assert m.n_params_total == total
    # Gemma 3 report (arXiv 2503.19786) table 1: 3,209M non-embedding parameters
    assert m.block_params / 1e6 == pytest.approx(3209, rel=0.001)
    assert step_bytes("gemma-3-4b") == pytest.approx(BF16 * total, rel=1e-12)  # tied: the table once, as LM head


# ---- Kimi Delta Attention + MLA: Kimi Linear --------------------------------------------------------------

def test_kimi_linear_caches_latents_in_7_layers_and_a_kda_state_in_20_by_hand():
    m = CAT["kimi-linear-48b-a3b"]
    assert (m.n_attention_layers, m.n_linear_layers) == (7, 20)
    assert m.kv_bytes_per_token("bf16") == 7 * (512 + 64) * BF16 == 8_064
    per_layer = 32 * 128 * 128 + 3 * 3 * 32 * 128  # H d d recurrent state + (4 - 1) x q, k, v conv inputs
    assert m.state_bytes_per_sequence("bf16") == 20 * per_layer * BF16 == 22_446_080
    D = 32 * 128
    kda = (4 * 2304 * D + 2 * 2304 * 128 + 2 * 128 * D + 2304 * 32 + 3 * 4 * D + D + 32 + 128)
    expert = 3 * 2304 * 1024
    total = (7 * mla(2304, 32, 512, None, 128, 64, 128) + 20 * kda + 26 * (257 * expert + 2304 * 256)
             + 3 * 2304 * 9216 + 2 * 2304 * 27 + 2 * 163840 * 2304 + 2304)
    assert m.n_params_total == total
    assert step_bytes("kimi-linear-48b-a3b") == pytest.approx(
        BF16 * (total - 163840 * 2304 - 26 * 248 * expert), rel=1e-12)


# ---- published sizes ------------------------------------------------------------------------------------

PUBLISHED_B = {  # (total, active, tolerance), as each vendor states them
    "minimax-m2.5": (229.9, None, 0.01),          # MiniMax M2.5 report: 229.9B total
    "qwen3.5-397b-a17b": (397, 17, 0.03),         # Qwen3.5 card: 397B total, 17B activated
    "qwen3.5-35b-a3b": (35, 3, 0.03),             # Qwen3.5-35B-A3B card ("A3B" counts no vocabulary: below)
    "qwen3-coder-480b-a35b": (480, 35, 0.015),    # Qwen3-Coder card: 480B total, 35B activated
    "llama-3.1-405b": (405, None, 0.01),          # Meta: 405B
    "glm-4.7-flash": (30, None, 0.01),            # Z.ai: 30B-A3B
    "ernie-4.5-21b-a3b": (21.8, 3, 0.15),         # Baidu: 21B total (21.8B summed), 3B activated
    "kimi-linear-48b-a3b": (48, 3, 0.03),         # Moonshot: 48B total, 3B activated (49.1B summed)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_serving_models_match_their_published_sizes_and_cite_a_config(name):
    m = CAT[name]
    total, active, tol = PUBLISHED_B[name]
    assert m.sources[0].startswith("https://huggingface.co/") and m.sources[0].endswith("config.json")
    assert m.n_params_total / 1e9 == pytest.approx(total, rel=tol)
    if active is not None:
        # active counts without the vocabulary tensors (the way these vendors count "A3B", "A17B")
        assert (m.n_params_active - m.embedding_params) / 1e9 == pytest.approx(active, rel=0.25)


# ---- the corpus's HF ids ----------------------------------------------------------------------------------

CORPUS_IDS = {
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5", "MiniMaxAI/MiniMax-M2": "minimax-m2",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b", "amd/Qwen3.5-397B-A17B-MXFP4": "qwen3.5-397b-a17b",
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5-35b-a3b", "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "zai-org/GLM-4.7-Flash": "glm-4.7-flash", "Qwen/Qwen3-Coder-Next": "qwen3-coder-next",
    "baidu/ERNIE-4.5-21B-A3B-PT": "ernie-4.5-21b-a3b",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": "qwen3-coder-480b-a35b",
    "moonshotai/Kimi-Linear-48B-A3B-Instruct": "kimi-linear-48b-a3b",
    "nvidia/DeepSeek-R1-0528-FP4-V2": "deepseek-r1", "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
    "Qwen/Qwen2.5-Coder-7B": "qwen2.5-7b", "google/gemma-3-4b-it": "gemma-3-4b",
}


def test_the_corpus_hf_ids_resolve_through_the_catalogs_hf_repos():
    catalog = set(CAT)
    for repo, name in CORPUS_IDS.items():
        assert MODEL_ALIASES[repo] == name and model_id(repo, catalog) == name
    assert model_id("stepfun-ai/Step-3.5-Flash", catalog) == "step-3.5-flash"  # its own query heads per layer kind
    # per-layer-type KV heads and head dims (global_n_kv_heads, global_head_dim): tests/test_gemma4.py
    assert model_id("google/gemma-4-31B-it", catalog) == "gemma-4-31b"
    # an alias applies only when the catalog passed holds its target
    assert model_id("MiniMaxAI/MiniMax-M2.5", catalog - {"minimax-m2.5"}) is None
    # every HF id the corpus names that the catalog claims is one of these or older
    named = {r["model"] for r in load_corpus()}
    assert set(CORPUS_IDS) - {"Qwen/Qwen2.5-Coder-7B"} <= named | {"Qwen/Qwen2.5-Coder-7B"}


# ---- the config.json reader reads the same families --------------------------------------------------------

MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "num_hidden_layers": 62,
    "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 1536, "vocab_size": 200064, "num_experts_per_tok": 8, "num_local_experts": 256,
    "max_position_embeddings": 196608, "rotary_dim": 64, "tie_word_embeddings": False, "use_qk_norm": True,
    "use_mtp": True, "mtp_transformer_layers": 1, "num_mtp_modules": 3, "shared_intermediate_size": 0,
    "attn_type_list": [1] * 62, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}

QWEN35_397B = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_moe_text", "attn_output_gate": True, "dtype": "bfloat16", "full_attention_interval": 4,
        "head_dim": 256, "hidden_size": 4096,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 15, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 64,
        "linear_value_head_dim": 128, "max_position_embeddings": 262144, "moe_intermediate_size": 1024,
        "mtp_num_hidden_layers": 1, "num_attention_heads": 32, "num_experts": 512, "num_experts_per_tok": 10,
        "num_hidden_layers": 60, "num_key_value_heads": 2, "shared_expert_intermediate_size": 1024,
        "vocab_size": 248320, "mamba_ssm_dtype": "float32",
    },
    "vision_config": {"depth": 27},
}

GLM_47_FLASH = {
    "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "num_hidden_layers": 47,
    "hidden_size": 2048, "num_attention_heads": 20, "num_key_value_heads": 20, "head_dim": 64,
    "intermediate_size": 10240, "vocab_size": 154880, "max_position_embeddings": 202752, "n_routed_experts": 64,
    "n_shared_experts": 1, "num_experts_per_tok": 4, "moe_intermediate_size": 1536, "first_k_dense_replace": 1,
    "kv_lora_rank": 512, "q_lora_rank": 768, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
    "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}

ERNIE_21B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": 2560,
    "intermediate_size": 12288, "max_position_embeddings": 131072, "num_attention_heads": 20,
    "num_key_value_heads": 4, "head_dim": None, "num_hidden_layers": 28, "vocab_size": 103424, "use_bias": False,
    "tie_word_embeddings": True, "moe_num_experts": 64, "moe_layer_start_index": 1, "moe_layer_end_index": 27,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_interval": 1, "moe_num_shared_experts": 2,
    "torch_dtype": "bfloat16",
}

KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "q_lora_rank": None,
    "mla_use_nope": True, "tie_word_embeddings": False, "hidden_size": 2304, "num_hidden_layers": 27,
    "vocab_size": 163840, "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "num_experts": 256,
    "num_experts_per_token": 8, "num_shared_experts": 1, "moe_intermediate_size": 1024, "first_k_dense_replace": 1,
    "intermediate_size": 9216, "model_max_length": 1048576, "num_nextn_predict_layers": 0,
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
                           "short_conv_kernel_size": 4,
                           "kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)]},
}


@pytest.mark.parametrize("config, name", [
    (MINIMAX_M2, "minimax-m2.5"), (QWEN35_397B, "qwen3.5-397b-a17b"), (GLM_47_FLASH, "glm-4.7-flash"),
    (ERNIE_21B, "ernie-4.5-21b-a3b"), (KIMI_LINEAR, "kimi-linear-48b-a3b"),
])
def test_a_config_json_of_each_family_reads_as_its_catalog_entry(tmp_path, config, name):
    (tmp_path / "config.json").write_text(json.dumps(config))
    m, ref = spec_from_hf_config(tmp_path), CAT[name]
    for field in ("n_layers", "n_heads", "n_kv_heads", "n_experts", "n_experts_active", "n_shared_experts",
                  "n_routed_layers", "expert_ffn", "mla", "linear_attention", "attention_output_gate",
                  "mtp_layers", "tie_embeddings", "max_context"):
        assert getattr(m, field) == getattr(ref, field), field
    assert m.n_params_total == ref.n_params_total
    assert m.kv_bytes_per_token("bf16") == ref.kv_bytes_per_token("bf16")
    assert m.state_bytes_per_sequence("bf16") == ref.state_bytes_per_sequence("bf16")
    assert m.default_quant == ref.default_quant


def test_unmodelled_variants_of_these_families_are_one_error_naming_the_field(tmp_path):
    cases = [
        ({**MINIMAX_M2, "attn_type_list": [0] * 7 + [1] + [0] * 54}, "attn_type_list"),  # lightning attention
        ({**MINIMAX_M2, "shared_intermediate_size": 512}, "shared_intermediate_size"),
        ({k: v for k, v in KIMI_LINEAR.items() if k != "linear_attn_config"}, "linear_attn_config"),
        ({"model_type": "step3p5", "num_hidden_layers": 45}, "model_type"),  # Step-3.5-Flash: not modelled
        ({**QWEN35_397B, "text_config": {**QWEN35_397B["text_config"], "shared_expert_intermediate_size": 512}},
         "shared_expert_intermediate_size"),
    ]
    for config, field in cases:
        (tmp_path / "config.json").write_text(json.dumps(config))
        with pytest.raises(ConfigError) as e:
            spec_from_hf_config(tmp_path)
        assert e.value.field == field, config.get("model_type")
        assert "\n" not in str(e.value)


# ---- the fixed state of hybrid models is held per device --------------------------------------------------

def test_tensor_parallel_ranks_each_hold_their_share_of_the_fixed_state():
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.engine.build import plan_kv

    m, h200 = CAT["qwen3-coder-next"], load_profile("h200")
    eng = load_engine("vllm")
    state = m.state_bytes_per_sequence(eng.kv_dtype) * eng.max_num_seqs  # all sequences, all layers
    tp2 = plan_kv(h200, m, "bf16", eng.with_overrides(tp=2)).activation_reserve_bytes
    tp4 = plan_kv(h200, m, "bf16", eng.with_overrides(tp=4)).activation_reserve_bytes
    # the same activation reserve on every rank; the state split 2 and 4 ways (heads across ranks)
    assert tp2 - tp4 == pytest.approx(state / 2 - state / 4)
    # the SGLang cookbook's TP2 Qwen3-Coder-Next on B200 (80 GB of bf16 weights per GPU) now plans
    assert plan_kv(load_profile("b200"), m, "bf16", load_engine("sglang").with_overrides(tp=2)).capacity_tokens > 0
