"""ModelSpec: the catalog against published sizes, derived quantities by hand, catalog errors, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import INFERSIM
from pydantic import ValidationError
from typer.testing import CliRunner

from sim.catalog.lookup import get_model
from sim.catalog.models import ModelSpec, load_catalog
from sim.cli import app
from sim.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

REQUIRED = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b", "llama-2-7b", "mistral-7b-v0.3", "mixtral-8x7b",
    "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-30b-a3b", "gemma-3-270m", "phi-3-mini-4k",
    "deepseek-r1-distill-qwen-7b",
]

# Published parameter counts (billions): the "Model size" Hugging Face computes from each model's
# safetensors, or the model card, for the model named in the catalog's first source.
PUBLISHED_B = {
    "llama-3.1-8b": (8.03, None),     # meta-llama/Llama-3.1-8B: 8.03B params
    "llama-3.1-70b": (70.6, None),    # meta-llama/Llama-3.1-70B: 70.6B
    "llama-3.3-70b": (70.6, None),    # meta-llama/Llama-3.3-70B-Instruct: 70.6B
    "llama-2-7b": (6.74, None),       # meta-llama/Llama-2-7b-hf: 6.74B
    "mistral-7b-v0.3": (7.25, None),  # mistralai/Mistral-7B-v0.3: 7.25B
    "mixtral-8x7b": (46.7, 12.9),     # Mixtral of Experts (arXiv 2401.04088): 47B total, 13B active
    "qwen2.5-7b": (7.61, None),       # Qwen2.5-7B-Instruct card: "Number of Parameters: 7.61B"
    "qwen2.5-72b": (72.7, None),      # Qwen2.5-72B-Instruct card: 72.7B
    "qwen3-8b": (8.2, None),          # Qwen3-8B card: 8.2B
    "qwen3-30b-a3b": (30.5, 3.3),     # Qwen3-30B-A3B card: 30.5B total, 3.3B activated
    "gemma-3-270m": (0.268, None),    # Gemma 3 270M: 170M embedding + 100M transformer parameters
    "phi-3-mini-4k": (3.8, None),     # Phi-3 technical report (arXiv 2404.14219): 3.8B
    "deepseek-r1-distill-qwen-7b": (7.62, None),  # deepseek-ai/DeepSeek-R1-Distill-Qwen-7B: 7.62B
}


def test_catalog_holds_every_required_model_with_a_cited_config():
    cat = load_catalog()
    for name in REQUIRED:
        assert name in cat, name
        assert any(s.startswith("https://huggingface.co/") and s.endswith("config.json") or "config.json" in s
                   for s in cat[name].sources), name


@pytest.mark.parametrize("name", REQUIRED)
def test_computed_parameter_counts_match_published_sizes(name):
    m = load_catalog()[name]
    total_b, active_b = PUBLISHED_B[name]
    # Published figures are rounded to 2-3 significant digits; 1.5% covers the rounding
    # (Mixtral's "47B / 13B" is the loosest) and the norms/q-k-norms the formula leaves out.
    assert m.n_params_total / 1e9 == pytest.approx(total_b, rel=0.015)
    if active_b is not None:
        assert m.is_moe
        assert m.n_params_active / 1e9 == pytest.approx(active_b, rel=0.03)
    else:
        assert m.n_params_active == m.n_params_total


def test_llama_3_1_8b_derived_quantities_by_hand():
    m = load_catalog()["llama-3.1-8b"]
    # h=4096, H=32, K=8, d=128, F=14336, L=32, V=128256, untied.
    attention = 4096 * 4096 + 4096 * 1024 + 4096 * 1024 + 4096 * 4096  # q, k, v, o = 41,943,040
    ffn = 3 * 4096 * 14336  # gate, up, down = 176,160,768
    norms = 2 * 4096
    per_layer = attention + ffn + norms  # 218,112,000
    embeddings = 2 * 128256 * 4096  # input table + lm_head = 1,050,673,152
    total = 32 * per_layer + embeddings + 4096  # + final norm
    assert total == 8_030_261_248
    assert m.n_params_total == total
    assert m.weight_bytes("bf16") == 2 * total  # 16,060,522,496 bytes
    # KV per token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 (GQA: not 32 heads).
    assert m.kv_bytes_per_token("fp16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert m.kv_bytes_per_token("fp8") == 65_536
    # Matmul params: 32 x (attention + FFN) + lm_head = 7,504,658,432; FLOPs = 2 x that + attention.
    matmul = 32 * (attention + ffn) + 128256 * 4096
    assert m.matmul_params_active == matmul == 7_504_658_432
    attention_flops_4k = 4 * 32 * 32 * 128 * 4096  # 2 (QK, PV) x 2 (mul+add) x L x H x d x context
    assert m.attention_flops_per_token(4096) == attention_flops_4k == 2_147_483_648
    assert m.flops_per_token(4096) == 2 * matmul + attention_flops_4k == 17_156_800_512
    assert m.flops_per_token(0) == 15_009_316_864


def test_qwen3_30b_a3b_moe_derived_quantities_by_hand():
    m = load_catalog()["qwen3-30b-a3b"]
    # h=2048, H=32, K=4, d=128 (H*d = 4096 != h), L=48, E=128 experts, k=8 active, F_e=768, V=151936.
    attention = 2048 * 4096 + 2048 * 512 + 2048 * 512 + 4096 * 2048  # 18,874,368
    expert = 3 * 2048 * 768  # 4,718,592
    router = 2048 * 128
    norms = 2 * 2048
    embeddings = 2 * 151936 * 2048  # 622,329,856
    total = 48 * (attention + 128 * expert + router + norms) + embeddings + 2048
    active = 48 * (attention + 8 * expert + router + norms) + embeddings + 2048
    assert (total, active) == (30_532_110_336, 3_353_020_416)
    assert (m.n_params_total, m.n_params_active) == (total, active)
    assert m.expert_bytes("bf16") == 48 * expert * 2 == 452_984_832  # one expert in every layer
    assert m.kv_bytes_per_token("fp16") == 2 * 48 * 4 * 128 * 2 == 98_304
    assert m.matmul_params_active == 48 * (attention + 8 * expert + router) + 151936 * 2048


def test_gemma_3_270m_sliding_window_layers_keep_only_the_window():
    m = load_catalog()["gemma-3-270m"]
    # 18 layers, 1 KV head x head_dim 256 (!= 640/4), window 512 in 15 layers, 3 full-attention layers.
    per_layer_token = 2 * 1 * 256 * 2  # K and V, fp16 = 1,024 bytes
    assert m.kv_bytes_per_token("fp16") == 18 * per_layer_token == 18_432
    assert m.kv_bytes_per_sequence(8192, "fp16") == (3 * 8192 + 15 * 512) * per_layer_token == 33_030_144
    assert m.kv_bytes_per_sequence(300, "fp16") == 300 * 18 * per_layer_token  # inside the window: all layers
    assert m.attention_flops_per_token(8192) == 4 * 4 * 256 * (3 * 8192 + 15 * 512)
    # Tied embedding counted once: 262,144 x 640 = 167,772,160 of 268,065,920 parameters.
    assert m.embedding_params == 262144 * 640
    assert m.n_params_total == 268_065_920


def test_qwen2_qkv_biases_add_h_plus_2k_times_d_per_layer():
    qwen = load_catalog()["qwen2.5-7b"]
    no_bias = qwen.model_copy(update={"qkv_bias": False})
    assert qwen.n_params_total - no_bias.n_params_total == 28 * (28 + 2 * 4) * 128


@settings(deadline=None, max_examples=60)
@given(context=st.integers(min_value=0, max_value=200_000), name=st.sampled_from(REQUIRED))
def test_kv_per_sequence_is_context_times_per_token_unless_layers_slide(context, name):
    m = load_catalog()[name]
    full = context * m.kv_bytes_per_token("fp16")
    seq = float(m.kv_bytes_per_sequence(context, "fp16"))
    if m.n_sliding_layers:
        assert seq <= full
        assert seq >= context * m.kv_bytes_per_token("fp16") * m.n_full_attention_layers / m.n_layers
    else:
        assert seq == full


def test_kv_and_flops_accept_numpy_context_arrays():
    m = load_catalog()["gemma-3-270m"]
    ctx = np.array([0, 100, 512, 4096])
    np.testing.assert_allclose(m.kv_bytes_per_sequence(ctx), [m.kv_bytes_per_sequence(int(c)) for c in ctx])
    np.testing.assert_allclose(m.flops_per_token(ctx), [m.flops_per_token(int(c)) for c in ctx])


def test_model_spec_rejects_inconsistent_numbers():
    base = dict(name="x", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2, intermediate_size=128,
                vocab_size=100, max_context=64)
    ModelSpec(**base)
    with pytest.raises(ValidationError, match="multiple of n_kv_heads"):
        ModelSpec(**{**base, "n_kv_heads": 3})
    with pytest.raises(ValidationError, match="n_experts_active"):
        ModelSpec(**{**base, "n_experts": 8, "n_experts_active": 9})
    with pytest.raises(ValidationError, match="needs sliding_window"):
        ModelSpec(**{**base, "n_sliding_layers": 1})
    with pytest.raises(ValidationError):
        ModelSpec(**{**base, "n_layers": 0})
    with pytest.raises(ValidationError, match="file_weight_bytes: unknown quantization 'q4km'"):
        ModelSpec(**{**base, "file_weight_bytes": {"q4km": 10}})


def test_measured_file_sizes_beat_the_table_only_for_their_own_quantization():
    gemma = load_catalog()["gemma-3-270m"]
    assert gemma.weight_bytes("q4_k_m") == 246_587_904  # the real Q4_K_M file
    assert gemma.nominal_weight_bytes("q4_k_m") < 246_587_904  # the table misses llama.cpp's fallbacks
    assert gemma.weight_bytes("q8_0") == gemma.nominal_weight_bytes("q8_0")


def test_unknown_model_suggests_close_catalog_names():
    with pytest.raises(ConfigError) as e:
        get_model("llama-3.1-8")
    assert e.value.field == "--model" and "did you mean: llama-3.1-8b" in str(e.value)


def test_bad_catalog_file_names_the_file_line_and_field(tmp_path):
    bad = tmp_path / "models.yaml"
    bad.write_text("ok-model:\n  n_layers: 2\n  hidden_size: 64\n  n_heads: 4\n  n_kv_heads: 2\n"
                   "  intermediate_size: 128\n  vocab_size: 100\n  max_context: 64\n"
                   "bad-model:\n  n_layers: -1\n  hidden_size: 64\n  n_heads: 4\n  n_kv_heads: 2\n"
                   "  intermediate_size: 128\n  vocab_size: 100\n  max_context: 64\n")
    with pytest.raises(ConfigError) as e:
        load_catalog(bad)
    assert (e.value.file, e.value.line, e.value.field) == (str(bad), 9, "bad-model.n_layers")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("m:\n  n_layerz: 2\n")
    with pytest.raises(ConfigError, match="unknown field|Field required"):
        load_catalog(unknown)


def test_cli_models_list_shows_every_catalog_model():
    result = runner.invoke(app, ["models", "list"])
    assert result.exit_code == 0, result.output
    for name in REQUIRED:
        assert name in result.output


def test_cli_models_show_json_gives_derived_numbers_for_the_chosen_quant_and_kv_dtype():
    result = runner.invoke(app, ["models", "show", "llama-3.1-8b", "--quant", "q8_0", "--kv-dtype", "fp8",
                                 "--context", "1000", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)["derived"]
    assert d["quant"] == "q8_0" and d["kv_dtype"] == "fp8"
    assert d["kv_bytes_per_token"] == 65_536 and d["kv_bytes_per_sequence"] == 65_536_000
    assert d["weight_bytes"] == pytest.approx(8_030_261_248 * 8.5 / 8)


def test_cli_models_show_table_and_errors():
    result = runner.invoke(app, ["models", "show", "qwen3-30b-a3b", "--quant", "fp8"])
    assert result.exit_code == 0, result.output
    assert "30,532,110,336" in result.output and "one expert" in result.output
    bad = runner.invoke(app, ["models", "show", "no-such-model"])
    assert bad.exit_code == 2
    assert "error: --model: unknown model 'no-such-model'" in bad.output
    bad_kv = runner.invoke(app, ["models", "show", "llama-3.1-8b", "--kv-dtype", "int3"])
    assert bad_kv.exit_code == 2 and "unknown KV-cache dtype" in bad_kv.output


def test_installed_infersim_command_reports_an_unknown_model_in_one_line():
    cmd = [INFERSIM]
    proc = subprocess.run([*cmd, "models", "show", "nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --model: unknown model 'nope'")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
